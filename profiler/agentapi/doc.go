// Package agentapi reads a running `vgpu-probe agent` over HTTP: its
// per-thread discontinuity snapshot (/api/v1/snapshot, also what
// `vgpu-probe agent --once --json` prints) and its switch timelines
// (/api/v1/timeline). The types here are the profiler's own decoding of
// that JSON, not the agent's: they keep only the fields the report uses
// and ignore the rest, so the agent can add fields without breaking it.
package agentapi
