package report

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/profiler/agentapi"
	"github.com/vgpu-probe/vgpu-probe/results"
)

// cell makes a results cell: steps of 1 ms each at baseline, kernels of
// 0.5 ms.
func cell(sc, mode string, wall, launchP99, recvP99 float64) results.Cell {
	k := results.Key{Scenario: sc, VCPUs: 2, Mode: mode}
	if sc != "baseline" {
		k.Corunner, k.Corunners = "while1", 1
	}
	return results.Cell{Key: k, Median: results.Result{WallS: wall, Steps: 1000, LaunchP50US: 1, LaunchP99US: launchP99,
		ReceiveP50US: 2, ReceiveP99US: recvP99}, KernelsPerS: 1000 / wall}
}

func file(cells ...results.Cell) *results.File {
	return &results.File{Version: 1, Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Config: results.Config{Workload: "namd-like", KernelUS: 500, Steps: 1000, Reps: 3}, Cells: cells}
}

func build(t *testing.T, in Inputs) *Report {
	t.Helper()
	r, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSlowdownUtilDropAndTableII(t *testing.T) {
	f := file(
		cell("baseline", "spin", 1, 2, 3),
		cell("baseline", "block", 1.2, 2, 60),
		cell("shared1", "spin", 3, 30000, 29000),
		cell("shared1", "block", 1.5, 2, 14000),
		cell("shared2", "spin", 1.5, 40, 100),
		cell("shared2", "block", 1.3, 2, 300),
	)
	r := build(t, Inputs{Results: []ResultsInput{{"r.json", f}}})
	e := r.Experiments[0]
	if !r.Generated.Equal(f.Created) {
		t.Errorf("generated %v, want the results' time %v", r.Generated, f.Created)
	}
	got := map[string]Cell{}
	for _, c := range e.Cells {
		got[c.Label()] = c
	}
	c := got["shared1 2 vCPUs 1 x while1 spin"]
	if c.Slowdown != 3 {
		t.Errorf("slowdown = %v, want 3 (3 s over the 1 s baseline)", c.Slowdown)
	}
	if want := 0.5; got["baseline 2 vCPUs spin"].GPUUtil != want {
		t.Errorf("baseline util = %v, want %v (1000 kernels/s x 0.5 ms)", got["baseline 2 vCPUs spin"].GPUUtil, want)
	}
	if d := c.GPUUtilDrop; d == nil || *d < 0.666 || *d > 0.667 {
		t.Errorf("util drop = %v, want 2/3", d)
	}
	// One reference per vCPU count: the fastest baseline cell (spin, 1 s),
	// for block's cells too.
	if s := got["baseline 2 vCPUs block"].Slowdown; s != 1.2 {
		t.Errorf("baseline block slowdown = %v, want 1.2 (1.2 s over spin's 1 s)", s)
	}
	if s := got["shared1 2 vCPUs 1 x while1 block"].Slowdown; s != 1.5 {
		t.Errorf("shared1 block slowdown = %v, want 1.5 (1.5 s over spin's 1 s, not over block's own baseline)", s)
	}
	if !got["shared1 2 vCPUs 1 x while1 block"].Fastest || got["shared1 2 vCPUs 1 x while1 spin"].Fastest {
		t.Errorf("shared1: block (1.5 s) is the fastest mode, spin (3 s) is not")
	}
	if e.Reference != "baseline" || !strings.Contains(e.BottomLine, "shared1 2 vCPUs 1 x while1: block, 100% ahead of spin") {
		t.Errorf("reference %q, bottom line %q", e.Reference, e.BottomLine)
	}
	// The verdict's "up to" is the worst cell's slowdown as the table shows
	// it, a cell that shares CPUs (a slow mode alone is not harm).
	if v := e.Verdict; v.WorstSlowdown != 3 || v.WorstCell != "shared1 2 vCPUs 1 x while1 spin" || !strings.Contains(v.Why, "up to 3.00x slower") {
		t.Errorf("verdict worst %v (%s): %s", v.WorstSlowdown, v.WorstCell, v.Why)
	}
	tab := e.Latency
	if tab == nil || tab.Setting != "shared1 2 vCPUs 1 x while1" {
		t.Fatalf("Table II = %+v, want it under shared1 (the most contended)", tab)
	}
	// Cycle: the median baseline step, 1 ms and 1.2 ms -> 1.1 ms.
	if tab.CycleUS < 1099 || tab.CycleUS > 1101 {
		t.Errorf("cycle = %v µs, want 1100", tab.CycleUS)
	}
	rows := map[string]LatencyRow{}
	for _, row := range tab.Rows {
		rows[row.Mode] = row
	}
	if rows["spin"].LaunchClass != "high" || rows["spin"].ReceiveClass != "high" ||
		rows["block"].LaunchClass != "negligible" || rows["block"].ReceiveClass != "high" {
		t.Errorf("classes = %+v", rows)
	}
	if p := rows["spin"].ReceiveBaselineP99US; p == nil || *p != 3 {
		t.Errorf("baseline column = %+v", rows["spin"])
	}
	v := e.Verdict
	if v.SyncIntensive == nil || !*v.SyncIntensive || !v.IsVulnerable() || v.WorstSlowdown != 3 || v.BestMode != "block" || v.RunnerUp != "spin" {
		t.Errorf("verdict = %+v", v)
	}
	if !strings.Contains(v.Why, "3.00x") || !strings.Contains(v.Why, "1000 kernels/s") {
		t.Errorf("verdict does not give its numbers: %q", v.Why)
	}
}

func TestLatencyClass(t *testing.T) {
	for _, tc := range []struct {
		us, cycle float64
		want      string
	}{{10, 1000, "negligible"}, {49, 1000, "negligible"}, {50, 1000, "low"}, {499, 1000, "low"}, {500, 1000, "high"}, {1, 0, ""}} {
		if got := latencyClass(&tc.us, tc.cycle); got != tc.want {
			t.Errorf("latencyClass(%v, %v) = %s, want %s", tc.us, tc.cycle, got, tc.want)
		}
	}
}

func TestVerdictNotSyncIntensive(t *testing.T) {
	slow := func(sc string, wall float64) results.Cell {
		c := cell(sc, "spin", wall, 1, 1)
		c.Median.Steps, c.KernelsPerS = 10, 10/wall // 1 kernel/s, like r.srad
		return c
	}
	r := build(t, Inputs{Results: []ResultsInput{{"r.json", file(slow("baseline", 10), slow("shared1", 25))}}})
	v := r.Experiments[0].Verdict
	if v.SyncIntensive == nil || *v.SyncIntensive || v.IsVulnerable() {
		t.Errorf("1 kernel/s judged sync-intensive: %+v", v)
	}
	if !strings.HasPrefix(v.Why, "not sync-intensive: 1 kernels/s") {
		t.Errorf("why = %q", v.Why)
	}
	// Sync-intensive but unhurt.
	r = build(t, Inputs{Results: []ResultsInput{{"r.json", file(cell("baseline", "spin", 1, 1, 1), cell("shared1", "spin", 1.05, 1, 1))}}})
	if v := r.Experiments[0].Verdict; v.SyncIntensive == nil || !*v.SyncIntensive || !v.Judged() || v.IsVulnerable() {
		t.Errorf("1.05x judged %+v", v)
	}
}

func TestNoBaseline(t *testing.T) {
	r := build(t, Inputs{Results: []ResultsInput{{"r.json", file(cell("shared1", "spin", 2, 1, 1))}}})
	c := r.Experiments[0].Cells[0]
	if c.Slowdown != 0 || c.GPUUtilDrop != nil {
		t.Errorf("without a baseline: %+v", c)
	}
	if r.Experiments[0].Latency != nil {
		t.Errorf("Table II without a baseline slowdown: %+v", r.Experiments[0].Latency)
	}
}

func thread(steal, offP50, wake float64, corunner string) agentapi.Thread {
	th := agentapi.Thread{TID: 1, VCPU: 0, RunSeconds: 1, StealFraction: steal, OffCPUP50US: offP50, WakeP50US: wake, PreemptionsPerSecond: 100}
	if corunner != "" {
		th.Corunners = []agentapi.Corunner{{TGID: 99, Comm: corunner, WaitedSeconds: 0.5}}
	}
	return th
}

func TestVMRankingAndRecommendations(t *testing.T) {
	snap := &agentapi.Snapshot{Time: time.Date(2026, 5, 5, 0, 0, 0, 0, time.UTC), Targets: []agentapi.Target{
		{Name: "quiet", Kind: "domain", Threads: []agentapi.Thread{thread(0.01, 50, 20, "")}},
		{Name: "crushed", Kind: "domain", Threads: []agentapi.Thread{thread(0.40, 20000, 20, "stress"), thread(0.30, 8000, 20, "stress")}},
		{Name: "unbounded", Kind: "domain", Threads: []agentapi.Thread{thread(0.10, 4000, 20, "x264")}},
		{Name: "capped", Kind: "domain", QuotaUS: 10000, PeriodUS: 20000, Threads: []agentapi.Thread{thread(0.12, 4000, 2000, "x264")}},
		{Name: "idle", Kind: "pid", Threads: []agentapi.Thread{{TID: 5, VCPU: -1}}},
		// Off the CPU for long stretches, but asleep, not waiting.
		{Name: "sleeper", Kind: "domain", Threads: []agentapi.Thread{thread(0.009, 2000, 20, "")}},
		// Waiting, though no co-runner was named.
		{Name: "anonymous", Kind: "domain", Threads: []agentapi.Thread{thread(0.06, 300, 20, "")}},
	}}
	r := build(t, Inputs{Agents: []AgentInput{{URL: "http://h:1", Snapshot: snap}}})
	var order []string
	act := map[string]Recommendation{}
	for _, v := range r.VMs {
		order = append(order, v.Name)
		act[v.Name] = v.Recommendation
	}
	if got := strings.Join(order, " "); got != "crushed capped unbounded anonymous quiet sleeper idle" {
		t.Errorf("ranking = %s", got)
	}
	for name, want := range map[string]string{"quiet": ActionNothing, "crushed": ActionDedicate, "unbounded": ActionBandwidth,
		"capped": ActionHybridsync, "idle": ActionInsufficientD, "sleeper": ActionNothing, "anonymous": ActionBandwidth} {
		if act[name].Action != want {
			t.Errorf("%s: %s (%s), want %s", name, act[name].Action, act[name].Why, want)
		}
	}
	if w := act["crushed"].Why; !strings.Contains(w, "35.0%") || !strings.Contains(w, "stress") {
		t.Errorf("crushed: the reason lacks its numbers: %q", w)
	}
	if w := act["capped"].Why; !strings.Contains(w, "wake-up p50 2.00 ms") {
		t.Errorf("capped: %q", w)
	}
	if !r.Generated.Equal(snap.Time) {
		t.Errorf("generated %v, want the snapshot's time", r.Generated)
	}
}

func TestPidTargetIgnoresIdleThreadsAndItself(t *testing.T) {
	snap := &agentapi.Snapshot{Targets: []agentapi.Target{{Name: "42", Kind: "pid", Threads: []agentapi.Thread{
		{TID: 42, VCPU: -1, RunSeconds: 1, RunnableWaitSeconds: 1, StealFraction: 0.5,
			Corunners: []agentapi.Corunner{{TGID: 42, Comm: "self", WaitedSeconds: 9}, {TGID: 7, Comm: "other", WaitedSeconds: 1}}},
		{TID: 43, VCPU: -1, RunSeconds: 0.001},
	}}}}
	vm := vmsOf("x", snap)[0]
	if vm.VCPUs != 1 || vm.StealPct != 50 || vm.TopCorunner != "other" {
		t.Errorf("vm = %+v", vm)
	}
}

func TestAgentSnapshotInResultsCell(t *testing.T) {
	c := cell("shared1", "spin", 2, 1, 1)
	c.Agent = []byte(`{"targets":[{"name":"runner","kind":"pid","threads":[{"tid":1,"vcpu":0,"run_seconds":1,"steal_fraction":0.3}]}],"extra":1}`)
	r := build(t, Inputs{Results: []ResultsInput{{"r.json", file(c)}}})
	if len(r.VMs) != 1 || r.VMs[0].Source != "r.json [shared1 2 vCPUs 1 x while1 spin]" || r.VMs[0].StealPct != 30 {
		t.Errorf("VMs = %+v", r.VMs)
	}
	c.Agent = []byte(`{"nope": true}`)
	if _, err := Build(Inputs{Results: []ResultsInput{{"r.json", file(c)}}}); err == nil || !strings.Contains(err.Error(), "agent snapshot") {
		t.Errorf("bad agent JSON in a cell: err = %v", err)
	}
}

func TestReadStats(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "s.json")
		os.WriteFile(p, []byte(s), 0o644)
		return p
	}
	s, err := ReadStats(write(`{"version":1,"mode":"hybrid","calls":10,"spin_hits":4,"blocks":6,"kernels":[{"id":1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := syncOf(s); got.SpinHitPct != 40 || got.BlockPct != 60 || got.Kernels != 1 {
		t.Errorf("summary = %+v", got)
	}
	if _, err := ReadStats(write(`{"version":9,"mode":"hybrid"}`)); !errors.Is(err, ErrNewerVersion) {
		t.Errorf("newer: %v", err)
	}
	for _, bad := range []string{`{"version":1,"mode":"hyb`, `[]`, `{"calls": 3}`} {
		if _, err := ReadStats(write(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		} else if strings.Contains(err.Error(), "\n") {
			t.Errorf("error spans lines: %q", err)
		}
	}
}

func TestFormatUS(t *testing.T) {
	for us, want := range map[float64]string{0: "0", 0.25: "0.2 µs", 68.4: "68 µs", 1500: "1.50 ms", 2.5e6: "2.50 s"} {
		if got := FormatUS(us); got != want {
			t.Errorf("FormatUS(%v) = %q, want %q", us, got, want)
		}
	}
}
