// Package exporter serves what the agent measures: Prometheus metrics at
// /metrics (base units, labels domain and vcpu), the JSON snapshot at
// /api/v1/snapshot and switch timelines at
// /api/v1/timeline?domain=NAME&seconds=N.
package exporter
