// Package prometheus holds the Prometheus recording and alerting rules
// shipped for vgpu-probe agents (vgpu-probe.rules.yml); its tests check
// them with promtool against the unit tests in vgpu-probe.rules.test.yml.
// The metric names the rules use are checked against the exporter by
// agent/exporter's tests.
package prometheus
