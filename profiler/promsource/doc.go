// Package promsource reads what vgpu-probe agents exported from a
// Prometheus server and turns it into the agent snapshots the report
// builder ranks (profiler/report), so that `vgpu-probe report
// --prometheus URL` covers a fleet with a fixed number of aggregated
// queries, one per measured quantity, however many hosts Prometheus
// scrapes. The PromQL lives in queries.go alone.
package promsource
