// Package loadtest holds the agent's HTTP load test (VGPU_BENCH_HTTP=1,
// make bench-agent-http): the real agent, watching a real busy target
// inside a 256 MB memory cgroup, under many clients, worst-case timeline
// requests and a flood of idle keep-alive connections; then watching 200
// processes under 60 back-to-back scrapers, and with 20,000 connections,
// timeline readers and scrapers at once; and what a sleeping process and
// a process naming its threads like vCPUs cost in series.
package loadtest
