// Package exporter serves what the agent measures: Prometheus metrics at
// /metrics (base units; labels domain, vcpu and corunner, bounded so that
// a fleet's series stay within SeriesPerVCPU and SeriesPerTarget; see
// docs/agent.md "Metrics"), the JSON snapshot at
// /api/v1/snapshot and switch timelines at
// /api/v1/timeline?domain=NAME&seconds=N.
package exporter
