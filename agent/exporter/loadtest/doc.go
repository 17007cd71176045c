// Package loadtest holds the agent's HTTP load test (VGPU_BENCH_HTTP=1,
// make bench-agent-http): the real agent, watching a real busy target
// inside a 256 MB memory cgroup, under many clients, worst-case timeline
// requests and a flood of idle keep-alive connections.
package loadtest
