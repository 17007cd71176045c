package discover

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/agent/discover/discovertest"
)

// BenchmarkScan is one scan of the real /proc on a host with at least
// 200 processes (sleeps are started to make up the number), two of them
// VMs (Firecracker and Cloud Hypervisor stand-ins with 4 vCPU threads
// each), after the first scan: what a Source pays every MinEvery. The
// pct-core metric is that cost as a share of one core at one scan every
// MinEvery.
func BenchmarkScan(b *testing.B) {
	discovertest.StandIn(b, "firecracker", "fc_vcpu %d", 4, "--id", "bench-fc")
	discovertest.StandIn(b, "cloud-hypervisor", "vcpu%d", 4, "--api-socket", "/run/bench-ch.sock")
	ents, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	procs := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			procs++
		}
	}
	for ; procs < 200; procs++ {
		c := exec.Command("sleep", "600")
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Process.Kill(); c.Wait() })
	}
	s := NewScanner(Options{})
	vms, err := s.Scan()
	if err != nil {
		b.Fatal(err)
	}
	if len(vms) < 2 {
		b.Fatalf("found %d VMs, want the two stand-ins", len(vms))
	}
	var r0, r1 syscall.Rusage
	b.ResetTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	for i := 0; i < b.N; i++ {
		if _, err := s.Scan(); err != nil {
			b.Fatal(err)
		}
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
	b.StopTimer()
	cpu := time.Duration(r1.Utime.Nano() + r1.Stime.Nano() - r0.Utime.Nano() - r0.Stime.Nano())
	perScan := float64(cpu.Nanoseconds()) / float64(b.N)
	b.ReportMetric(perScan/1e3, "cpu-us/scan")
	b.ReportMetric(perScan/float64(MinEvery.Nanoseconds())*100, "pct-core")
	b.ReportMetric(float64(procs), "procs")
	b.ReportMetric(float64(len(vms)), "vms")
}
