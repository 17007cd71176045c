package corunner

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/internal/reexec"
)

func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// cpuTicks returns the user+system clock ticks a process has used.
func cpuTicks(t *testing.T, pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.Atoi(f[11])
	s, _ := strconv.Atoi(f[12])
	return u + s
}

// TestEveryKindBurnsCPUAndStops starts each co-runner for real: it must use
// CPU, run pinned where it was told, and be gone after Stop.
func TestEveryKindBurnsCPUAndStops(t *testing.T) {
	cpus, err := Online()
	if err != nil {
		t.Fatal(err)
	}
	cpu := cpus[len(cpus)-1]
	for _, kind := range Kinds {
		t.Run(kind, func(t *testing.T) {
			p, err := Start(kind, []int{cpu})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Stop()
			// A loaded machine may keep it off the CPU for a while; a
			// co-runner that never runs is what this catches.
			deadline := time.Now().Add(10 * time.Second)
			for cpuTicks(t, p.Pid()) == 0 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if ticks := cpuTicks(t, p.Pid()); ticks == 0 {
				t.Errorf("%s used no CPU in 10 s", kind)
			}
			p.Stop()
			if _, err := os.Stat("/proc/" + strconv.Itoa(p.Pid())); err == nil {
				t.Errorf("%s still running after Stop", kind)
			}
		})
	}
}

func TestStartRejectsBadInput(t *testing.T) {
	if _, err := Start("fork-bomb", []int{0}); err == nil {
		t.Error("unknown kind accepted")
	}
	if _, err := Start("while1", nil); err == nil {
		t.Error("no CPUs accepted")
	}
}

func TestParseCPUs(t *testing.T) {
	got, err := ParseCPUs("0-2,5")
	if err != nil || len(got) != 4 || got[3] != 5 {
		t.Errorf("ParseCPUs(0-2,5) = %v, %v", got, err)
	}
	for _, bad := range []string{"", "a", "3-1", "-1", "1,,2"} {
		if _, err := ParseCPUs(bad); err == nil {
			t.Errorf("ParseCPUs(%q) accepted", bad)
		}
	}
}

func FuzzParseCPUs(f *testing.F) {
	f.Add("0-3,6")
	f.Fuzz(func(t *testing.T, s string) {
		cpus, err := ParseCPUs(s)
		if err == nil && len(cpus) == 0 {
			t.Fatal("no error and no cpus")
		}
	})
}

// A busy-loop setting's co-runner accrues CPU time as it runs: bench
// reports its growth over each cell as the other tenant's throughput.
func TestSettingCPU(t *testing.T) {
	cpus, err := Online()
	if err != nil {
		t.Fatal(err)
	}
	none, err := Setup("none", cpus[len(cpus)-1], "", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := none.CPU(); ok {
		t.Error("a setting without a co-runner reports its CPU")
	}
	s, err := Setup("while1", cpus[len(cpus)-1], "", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c0, ok := s.CPU()
	if !ok {
		t.Fatal("the while1 setting reports no co-runner CPU")
	}
	time.Sleep(300 * time.Millisecond)
	if c1, _ := s.CPU(); c1 <= c0 {
		t.Errorf("co-runner CPU %v after 300 ms, %v before: want it to grow", c1, c0)
	}
}
