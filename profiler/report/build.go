package report

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/nvml"
	"github.com/vgpu-probe/vgpu-probe/profiler/agentapi"
	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/results/apptable"
	"github.com/vgpu-probe/vgpu-probe/results/compare"
	"github.com/vgpu-probe/vgpu-probe/results/decide"
	"github.com/vgpu-probe/vgpu-probe/results/stats"
)

// Inputs are what a report joins; any part may be empty.
type Inputs struct {
	Results []ResultsInput
	Stats   []StatsInput
	Agents  []AgentInput
	NVML    []NVMLInput
	// Now dates the report when no input carries a time (tests pin it).
	Now time.Time
	// Notes say how the inputs were read (the span Prometheus' rates
	// cover); they go into the report's notes first.
	Notes []string
}

// ResultsInput is one results file as read by results.Read.
type ResultsInput struct {
	Path string
	File *results.File
}

// StatsInput is one HYBRIDSYNC_STATS file.
type StatsInput struct {
	Path  string
	Stats hybridsync.Stats
}

// AgentInput is what one live agent answered.
type AgentInput struct {
	URL       string
	Snapshot  *agentapi.Snapshot
	Timelines map[string][]agentapi.OffCPU // by target name
}

// NVMLInput is one recording of NVML samples.
type NVMLInput struct {
	Path   string
	Series *nvml.Series
}

// Thresholds of the verdicts, from the paper unless said otherwise.
const (
	// syncIntensiveKPS: NAMD, which CPU sharing slows by up to 6.7x,
	// invokes 95-370 kernels/s; r.particle_filter and r.srad, barely
	// affected, about 1/s (Sec. IV).
	syncIntensiveKPS = 100
	// vulnerableSlowdown: the smallest slowdown Fig. 6 reports for one
	// co-runner VM (1.2x); less is within run-to-run noise of our runs.
	vulnerableSlowdown = 1.2
	// Latency classes relative to the step cycle: the paper calls 1.5 ms
	// "low" and 13.6-29.8 ms "high" against a 4.5 ms cycle.
	negligibleCycleFrac = 0.05
	lowCycleFrac        = 0.5
	// VM thresholds, on the share of time vCPUs waited for a CPU.
	stealQuietPct    = 5  // below: nothing to do
	stealDedicatePct = 25 // above: too much contention to mitigate in software
	wakeCostlyUS     = 1000
)

// Build joins in into a report.
func Build(in Inputs) (*Report, error) {
	r := &Report{Version: Version, Generated: in.Now.UTC(), Notes: slices.Clone(in.Notes)}
	latest := time.Time{}
	for i, ri := range in.Results {
		r.Sources = append(r.Sources, ri.Path)
		if ri.File.Created.After(latest) {
			latest = ri.File.Created
		}
		exp, traces, vms, err := buildExperiment(i, ri)
		if err != nil {
			return nil, err
		}
		r.Experiments = append(r.Experiments, exp)
		for _, n := range ri.File.Config.Notes {
			r.Notes = append(r.Notes, ri.Path+": "+n)
		}
		for _, c := range ri.File.Cells {
			if c.AgentError != "" {
				r.Notes = append(r.Notes, fmt.Sprintf("%s: %s: no agent snapshot: %s", ri.Path, compare.Label(c.Key), c.AgentError))
			}
		}
		r.Traces = append(r.Traces, traces...)
		r.VMs = append(r.VMs, vms...)
	}
	r.Apps = appsTables(in.Results)
	for _, a := range in.Agents {
		r.Sources = append(r.Sources, a.URL)
		if a.Snapshot.Time.After(latest) {
			latest = a.Snapshot.Time
		}
		r.VMs = append(r.VMs, vmsOf(a.URL, a.Snapshot)...)
		names := make([]string, 0, len(a.Timelines))
		for n := range a.Timelines {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			r.AgentTraces = append(r.AgentTraces, AgentTrace{Source: a.URL, Target: n, Events: a.Timelines[n]})
		}
	}
	for _, s := range in.Stats {
		r.Sources = append(r.Sources, s.Path)
		r.Sync = append(r.Sync, syncOf(s))
	}
	for _, n := range in.NVML {
		r.Sources = append(r.Sources, n.Path)
		r.GPUSeries = append(r.GPUSeries, GPUSeries{Source: n.Path, Series: n.Series})
		r.GPUs = append(r.GPUs, gpusOf(n)...)
		if len(n.Series.Samples) > 0 {
			if t := n.Series.Samples[len(n.Series.Samples)-1].Time; t.After(latest) {
				latest = t
			}
		}
	}
	if !latest.IsZero() {
		r.Generated = latest.UTC()
	}
	// Most interfered with first; ties by name so the order is stable.
	sort.SliceStable(r.VMs, func(i, j int) bool {
		if r.VMs[i].Score != r.VMs[j].Score {
			return r.VMs[i].Score > r.VMs[j].Score
		}
		return r.VMs[i].Source+r.VMs[i].Name < r.VMs[j].Source+r.VMs[j].Name
	})
	if len(r.Experiments) > 0 && len(r.Traces) == 0 {
		r.Notes = append(r.Notes, "no cell has a timeline: latency CDFs and the Perfetto trace need `vgpu-probe run` with timelines kept")
	}
	derived := false
	for _, e := range r.Experiments {
		derived = derived || slices.ContainsFunc(e.Cells, func(c Cell) bool { return c.GPUUtil > 0 })
	}
	if len(in.NVML) == 0 && derived {
		r.Notes = append(r.Notes, "no NVML samples: GPU utilisation is derived from kernel times (kernels/s x mean kernel time), not measured")
	}
	return r, nil
}

// appsTables computes apps' table (apptable.Table) of the inputs that
// carry runs, those of one agent setting together, in the order the
// settings first appear: runs made with and without the agent are not
// comparable, so they are never paired or taken into one median.
func appsTables(ins []ResultsInput) []AppsTable {
	var tables []AppsTable
	var files [][][]apptable.Run
	for _, ri := range ins {
		a := ri.File.Apps
		if a == nil || len(a.Runs) == 0 {
			continue
		}
		agent := strings.Join(apptable.AgentSettings(a.Runs), "; ")
		i := slices.IndexFunc(tables, func(t AppsTable) bool { return t.Agent == agent })
		if i < 0 {
			i = len(tables)
			tables = append(tables, AppsTable{Agent: agent})
			files = append(files, nil)
		}
		tables[i].Sources = append(tables[i].Sources, ri.Path)
		files[i] = append(files[i], a.Runs)
	}
	for i := range tables {
		runs := apptable.Combine(files[i])
		s := apptable.Table(runs)
		tables[i].Rows = s.Results
		tables[i].ForCPUSpeed = apptable.ForCPUSpeed(runs)
		if len(s.Failures) > 0 {
			tables[i].Failures = s.Failures
		}
	}
	return tables
}

// Setting is a key without its mode: what the co-runners and isolation
// were, the x axis of Figs. 4-6.
func Setting(k results.Key) results.Key {
	k.Mode = ""
	return k
}

func buildExperiment(idx int, ri ResultsInput) (Experiment, []Trace, []VM, error) {
	f := ri.File
	// The one slowdown of every output: the file's own Slowdown fields
	// may come from an older build that divided by each mode's baseline.
	cmp := compare.FromFile(f)
	kind := f.Kind
	if kind == "" {
		kind = results.KindRun
	}
	exp := Experiment{Source: ri.Path, Kind: kind, Workload: f.Config.Workload, Machine: f.Machine, Backend: f.Config.Backend,
		Device: f.Config.Device, Steps: f.Config.Steps, Reps: f.Config.Reps,
		Reference: cmp.Reference, SlowdownIs: cmp.Definition(), References: cmp.References(),
		Scenarios: cmp.Scenarios(), BottomLine: cmp.BottomLine(), Warnings: cmp.Warnings()}
	var traces []Trace
	var vms []VM
	for _, c := range f.Cells {
		cell := Cell{Key: c.Key, Name: compare.Label(c.Key), WallS: c.Median.WallS, MinWallS: c.MinWallS, MaxWallS: c.MaxWallS,
			CPUS: c.Median.CPUS, Slowdown: cmp.Slowdown(c.Key), KernelsPerS: c.KernelsPerS}
		if c.Median.Latencies() {
			cell.LaunchP50US, cell.LaunchP99US = opt(c.Median.LaunchP50US), opt(c.Median.LaunchP99US)
			cell.ReceiveP50US, cell.ReceiveP99US = opt(c.Median.ReceiveP50US), opt(c.Median.ReceiveP99US)
		}
		if e, ok := cmp.Lookup(c.Key); ok {
			cell.Fastest = e.Fastest
		}
		// Files of older builds left kernels/s out; the built-in loop
		// launches a kernel per step. An apps program's steps are its
		// own loop's, whose kernels nobody counted.
		if cell.KernelsPerS == 0 && c.Median.WallS > 0 && kind != results.KindApps {
			cell.KernelsPerS = float64(c.Median.Steps) / c.Median.WallS
		}
		kernelS := f.Config.KernelUS / 1e6
		if c.Timeline != nil {
			if m, ok := meanKernelS(c.Timeline); ok {
				kernelS = m
			}
			if len(c.Timeline.Steps) > 0 || len(c.Timeline.Threads) > 0 {
				traces = append(traces, Trace{Experiment: idx, Key: c.Key, Steps: c.Timeline.Steps, Threads: c.Timeline.Threads})
			}
		}
		// Each runner vCPU thread launches on its own stream: the share
		// of time a stream was busy is the rate per stream times the
		// kernel time.
		streams := float64(max(1, c.RunnerVCPUs))
		cell.GPUUtil = math.Min(1, cell.KernelsPerS/streams*kernelS)
		exp.Cells = append(exp.Cells, cell)
		if len(c.Agent) > 0 {
			snap, err := agentapi.ParseSnapshot(c.Agent)
			if err != nil {
				return exp, nil, nil, fmt.Errorf("%s: cell %s: agent snapshot: %w", ri.Path, compare.Label(c.Key), err)
			}
			src := fmt.Sprintf("%s [%s]", ri.Path, compare.Label(c.Key))
			vms = append(vms, vmsOf(src, snap)...)
		}
	}
	fillUtilDrops(exp.Cells, cmp.Reference)
	exp.Latency = latencyTable(exp.Cells, cmp.Reference)
	exp.Verdict = verdict(exp.Cells, f, cmp)
	return exp, traces, vms, nil
}

// opt is a measured value for a field that is nil when not measured.
func opt(x float64) *float64 { return &x }

// meanKernelS is the mean launch-to-completion time of the steps whose
// completion the device reported.
func meanKernelS(tl *results.Timeline) (float64, bool) {
	var sum float64
	n := 0
	for _, s := range tl.Steps {
		if s.Complete >= 0 && s.Complete >= s.Launch {
			sum += float64(s.Complete - s.Launch)
			n++
		}
	}
	if n == 0 {
		return 0, false
	}
	return sum / float64(n) / 1e9, true
}

// baselineFor finds the cell of the reference scenario (ref) whose
// latencies and GPU utilisation a cell's are shown beside: same mode,
// program and vCPU count, else the same mode's only one. (Slowdowns have
// one reference for all modes: compare.)
func baselineFor(cells []Cell, c Cell, ref string) *Cell {
	var same []*Cell
	for i := range cells {
		b := &cells[i]
		if b.Scenario != ref || b.Mode != c.Mode || b.Program != c.Program || b.Threshold != c.Threshold {
			continue
		}
		if b.VCPUs == c.VCPUs {
			return b
		}
		same = append(same, b)
	}
	if len(same) == 1 {
		return same[0]
	}
	return nil
}

// fillUtilDrops sets each cell's GPU utilisation drop from its mode's
// cell of the reference scenario.
func fillUtilDrops(cells []Cell, ref string) {
	for i := range cells {
		c := &cells[i]
		if c.Scenario == ref {
			continue
		}
		b := baselineFor(cells, *c, ref)
		if b == nil || b.GPUUtil <= 0 || c.GPUUtil <= 0 {
			continue // nothing measured to compare
		}
		c.GPUUtilDrop = opt(math.Max(0, 1-c.GPUUtil/b.GPUUtil))
	}
}

// mostContended is the setting (key without mode) with the highest mean
// slowdown over its modes: the paper's "maximum interference" setting.
func mostContended(cells []Cell, ref string) (results.Key, bool) {
	sum := map[results.Key]float64{}
	n := map[results.Key]int{}
	var order []results.Key
	for _, c := range cells {
		if c.Scenario == ref || c.Slowdown == 0 {
			continue
		}
		k := Setting(c.Key)
		if n[k] == 0 {
			order = append(order, k)
		}
		sum[k] += c.Slowdown
		n[k]++
	}
	best, found := results.Key{}, false
	for _, k := range order {
		if !found || sum[k]/float64(n[k]) > sum[best]/float64(n[best]) {
			best, found = k, true
		}
	}
	return best, found
}

// latencyTable is Table II for the most contended setting; nil where
// none of its cells recorded latencies.
func latencyTable(cells []Cell, ref string) *LatencyTable {
	set, ok := mostContended(cells, ref)
	if !ok {
		return nil
	}
	t := &LatencyTable{Setting: compare.Label(set)}
	var cycles []float64
	measured := false
	for _, c := range cells {
		if Setting(c.Key) != set {
			continue
		}
		measured = measured || c.LaunchP50US != nil
		row := LatencyRow{Mode: c.Mode, LaunchUS: c.LaunchP50US, LaunchP99US: c.LaunchP99US,
			ReceiveUS: c.ReceiveP50US, ReceiveP99US: c.ReceiveP99US, Slowdown: c.Slowdown}
		if b := baselineFor(cells, c, ref); b != nil {
			row.LaunchBaselineUS, row.ReceiveBaselineUS = b.LaunchP50US, b.ReceiveP50US
			row.LaunchBaselineP99US, row.ReceiveBaselineP99US = b.LaunchP99US, b.ReceiveP99US
			if b.KernelsPerS > 0 {
				cycles = append(cycles, 1e6/b.KernelsPerS)
			}
		}
		t.Rows = append(t.Rows, row)
	}
	if !measured {
		return nil
	}
	if len(cycles) == 0 {
		// No baseline: judge against the contended cells' own cycle.
		for _, c := range cells {
			if Setting(c.Key) == set && c.KernelsPerS > 0 {
				cycles = append(cycles, 1e6/c.KernelsPerS)
			}
		}
	}
	t.CycleUS = stats.Median(cycles)
	for i := range t.Rows {
		// Classed on the p99: a descheduled vCPU delays a few steps by
		// whole slices, which the paper's averages show and a median
		// hides.
		t.Rows[i].LaunchClass = latencyClass(t.Rows[i].LaunchP99US, t.CycleUS)
		t.Rows[i].ReceiveClass = latencyClass(t.Rows[i].ReceiveP99US, t.CycleUS)
	}
	return t
}

// latencyClass puts a latency in the paper's words; "" where the latency
// or the cycle it is judged against was not measured.
func latencyClass(us *float64, cycleUS float64) string {
	switch {
	case us == nil || cycleUS <= 0:
		return ""
	case *us < negligibleCycleFrac*cycleUS:
		return "negligible"
	case *us < lowCycleFrac*cycleUS:
		return "low"
	}
	return "high"
}

// verdict judges the workload from the cells: sync-intensive by the
// reference's kernel rate, vulnerable by the worst slowdown, and the best
// mode of the most contended setting with its margin over the runner-up
// (cmp's rows, as the bottom line ranks them). Where no cell counted
// kernels, sync intensity, and so vulnerability, is not judged.
func verdict(cells []Cell, f *results.File, cmp compare.Table) Verdict {
	ref := cmp.Reference
	var v Verdict
	for _, c := range cells {
		if c.Scenario == ref {
			v.KernelsPerS = math.Max(v.KernelsPerS, c.KernelsPerS)
			// A slower mode alone is not harm from CPU sharing.
			continue
		}
		if c.Slowdown > v.WorstSlowdown {
			v.WorstSlowdown, v.WorstCell = c.Slowdown, c.Name
		}
	}
	if v.KernelsPerS == 0 {
		// No baseline: the fastest cell is the closest to undisturbed.
		for _, c := range cells {
			v.KernelsPerS = math.Max(v.KernelsPerS, c.KernelsPerS)
		}
	}
	// The built-in workload waits for every kernel it launches; a timeline
	// shows it (a Noticed per step). For a command we cannot tell.
	for _, c := range f.Cells {
		if c.Timeline != nil && len(c.Timeline.Steps) > 0 {
			v.SyncsPerKernel = 1
			break
		}
	}
	if v.SyncsPerKernel == 0 && f.Config.Workload == "namd-like" {
		v.SyncsPerKernel = 1
	}
	lead, led := contendedLead(cells, f, ref)
	v.BestMode, v.RunnerUp, v.BestModeMargin, v.BestModeSign = lead.Best, lead.Next, lead.Margin, lead.Sign
	worst := ""
	if v.WorstSlowdown > 0 {
		worst = fmt.Sprintf("worst slowdown %.2fx (%s) against the fastest %s cell", v.WorstSlowdown, v.WorstCell, ref)
	}
	syncs := "waits per kernel unknown"
	if v.SyncsPerKernel > 0 {
		syncs = fmt.Sprintf("%.1f waits per kernel", v.SyncsPerKernel)
	}
	if v.KernelsPerS > 0 {
		intensive := v.KernelsPerS >= syncIntensiveKPS && (v.SyncsPerKernel == 0 || v.SyncsPerKernel >= 0.5)
		vulnerable := intensive && v.WorstSlowdown >= vulnerableSlowdown
		v.SyncIntensive, v.Vulnerable = &intensive, &vulnerable
	}
	switch {
	case v.SyncIntensive == nil:
		v.Why = "sync intensity not measured: no run counted kernels (a program or command timed whole), so vulnerability is not judged"
		if worst != "" {
			v.Why += "; " + worst
		}
	case *v.Vulnerable:
		v.Why = fmt.Sprintf("sync-intensive (%.0f kernels/s >= %d, %s) and hurt: up to %.2fx slower (%s) than the fastest %s cell",
			v.KernelsPerS, syncIntensiveKPS, syncs, v.WorstSlowdown, v.WorstCell, ref)
	case *v.SyncIntensive && v.WorstSlowdown == 0:
		v.Why = fmt.Sprintf("sync-intensive (%.0f kernels/s, %s), so exposed to vCPU discontinuity; no %s cell to measure a slowdown against", v.KernelsPerS, syncs, ref)
	case *v.SyncIntensive:
		v.Why = fmt.Sprintf("sync-intensive (%.0f kernels/s, %s) but not hurt here: %s < %.1fx", v.KernelsPerS, syncs, worst, vulnerableSlowdown)
	default:
		v.Why = fmt.Sprintf("not sync-intensive: %.0f kernels/s < %d; CPU sharing delays few launches and waits", v.KernelsPerS, syncIntensiveKPS)
	}
	v.Why += leadWords(lead, led)
	v.Hybrid = cmp.HybridNote()
	return v
}

// contendedLead is the fastest mode of the most contended setting by
// decide.Fastest (the rule advise decides by), and in how many of the
// settings other than the reference the same mode leads, of how many.
func contendedLead(cells []Cell, f *results.File, ref string) (decide.Lead, [2]int) {
	set, ok := mostContended(cells, ref)
	if !ok {
		return decide.Lead{}, [2]int{}
	}
	lead := decide.Fastest(modeTimes(f, set))
	var led [2]int
	seen := map[results.Key]bool{}
	for _, c := range f.Cells {
		k := Setting(c.Key)
		if c.Scenario == ref || seen[k] {
			continue
		}
		seen[k] = true
		led[1]++
		if decide.Fastest(modeTimes(f, k)).Best == lead.Best {
			led[0]++
		}
	}
	return lead, led
}

// modeTimes are the times of each mode of setting set, by repetition
// (compare.RepTimes: the table's own).
func modeTimes(f *results.File, set results.Key) map[string]decide.Times {
	out := map[string]decide.Times{}
	for _, c := range f.Cells {
		if Setting(c.Key) == set {
			out[c.Mode] = compare.RepTimes(c, f.Config.PerStep)
		}
	}
	return out
}

// leadWords is the verdict's clause on the fastest mode under contention:
// by how much it leads the runner-up in the most contended setting, in
// how many repetitions it beat every other mode, whether that settles it
// (decide.Test), and in how many contended settings it leads.
func leadWords(l decide.Lead, led [2]int) string {
	if l.Best == "" {
		return ""
	}
	if l.Next == "" {
		return fmt.Sprintf("; the only mode under contention: %s", l.Best)
	}
	settled := "settled by the sign test"
	if !l.Ahead() {
		settled = "not settled: as many would come by chance more than once in fifty"
	}
	where := ""
	if led[1] > 1 {
		where = fmt.Sprintf("; it leads %d of the %d settings under contention", led[0], led[1])
	}
	return fmt.Sprintf("; fastest mode under contention: %s, %s ahead of the runner-up %s, faster than every other mode in %d of %d repetitions (%s)%s",
		l.Best, fmtPct(l.Margin), l.Next, l.Sign.Wins, l.Sign.N, settled, where)
}

// fmtPct prints a share as bottom lines do: "6.6%", "23%".
func fmtPct(x float64) string {
	if x < 0.1 {
		return fmt.Sprintf("%.1f%%", 100*x)
	}
	return fmt.Sprintf("%.0f%%", 100*x)
}

// vmsOf turns a snapshot's targets into ranked-to-be VM rows.
func vmsOf(src string, s *agentapi.Snapshot) []VM {
	var out []VM
	for _, t := range s.Targets {
		ths := make([]agentapi.Thread, 0, len(t.Threads))
		for _, th := range t.Threads {
			if th.VCPU >= 0 {
				ths = append(ths, th)
			}
		}
		if len(ths) == 0 {
			ths = busyThreads(t.Threads)
		}
		vm := VM{Source: src, Name: t.Name, Kind: t.Kind, VCPUs: len(ths), QuotaUS: t.QuotaUS, PeriodUS: t.PeriodUS}
		var runs []float64
		waited := map[string]float64{}
		for _, th := range ths {
			steal := 100 * th.StealFraction
			vm.StealPct += steal
			vm.MaxStealPct = math.Max(vm.MaxStealPct, steal)
			vm.PreemptionsPerS += th.PreemptionsPerSecond
			runs = append(runs, th.RunP50US)
			vm.OffCPUP50US = math.Max(vm.OffCPUP50US, th.OffCPUP50US)
			vm.OffCPUP99US = math.Max(vm.OffCPUP99US, th.OffCPUP99US)
			vm.WakeP50US = math.Max(vm.WakeP50US, th.WakeP50US)
			vm.Throttles += th.Throttles
			for _, c := range th.Corunners {
				// A pid target's own other threads are not co-runners.
				if t.Kind == "pid" && strconv.Itoa(int(c.TGID)) == t.Name {
					continue
				}
				waited[c.Comm] += c.WaitedSeconds
			}
		}
		if len(ths) > 0 {
			vm.StealPct /= float64(len(ths))
			vm.RunP50US = stats.Median(runs)
		}
		for comm, w := range waited {
			if w > vm.CorunnerWaitS || (w == vm.CorunnerWaitS && comm < vm.TopCorunner) {
				vm.TopCorunner, vm.CorunnerWaitS = comm, w
			}
		}
		vm.Score = vm.StealPct
		vm.Recommendation = recommend(vm)
		out = append(out, vm)
	}
	return out
}

// recommend picks the cheapest change that addresses what the numbers
// show, in order: nothing wrong; contention too heavy for software
// (dedicate); contention with no isolation (bandwidth control, a host
// setting: the paper's Shared2 cut NAMD-polling's loss from 85% to 15%);
// otherwise, with isolation in place, slices that remain short or wake-ups
// that stay costly, which the wait primitive works around (hybridsync).
// busyThreads picks the threads of a pid or cgroup target (no vCPUs) that
// did the work: those that ran at least a tenth of the busiest one. A Go
// or QEMU process has idle helper threads whose zero steal would dilute
// the score.
func busyThreads(all []agentapi.Thread) []agentapi.Thread {
	most := 0.0
	for _, th := range all {
		most = math.Max(most, th.RunSeconds+th.RunnableWaitSeconds)
	}
	var out []agentapi.Thread
	for _, th := range all {
		if most > 0 && th.RunSeconds+th.RunnableWaitSeconds >= most/10 {
			out = append(out, th)
		}
	}
	return out
}

func recommend(vm VM) Recommendation {
	by := ""
	if vm.TopCorunner != "" {
		by = fmt.Sprintf(", mostly behind %s (%.2f s)", vm.TopCorunner, vm.CorunnerWaitS)
	}
	stats := fmt.Sprintf("vCPUs waited for a CPU %.1f%% of the time (worst %.1f%%), off-CPU p50 %s, %.0f preemptions/s%s",
		vm.StealPct, vm.MaxStealPct, fmtUS(vm.OffCPUP50US), vm.PreemptionsPerS, by)
	switch {
	case vm.VCPUs == 0:
		return Recommendation{ActionInsufficientD, "no thread of this target ran in the agent's window"}
	case vm.StealPct < stealQuietPct:
		// Off-CPU time alone says nothing: a vCPU that halts or a thread
		// that sleeps is off the CPU by choice. Only waiting counts.
		return Recommendation{ActionNothing, stats + fmt.Sprintf(": below %d%%, the vCPUs get the CPU when they want it", stealQuietPct)}
	case vm.StealPct >= stealDedicatePct:
		return Recommendation{ActionDedicate, stats + fmt.Sprintf(": at or above %d%%, more than a wait primitive can hide; pin the vCPUs to CPUs no other tenant uses", stealDedicatePct)}
	case vm.QuotaUS == 0 && vm.Throttles == 0:
		return Recommendation{ActionBandwidth, stats + ": nothing bounds how long a co-runner holds the CPU; a CPU bandwidth limit (cputune quota/period) on the VMs sharing it does"}
	default:
		why := stats
		if vm.Throttles > 0 {
			why += fmt.Sprintf(", %d quota throttles", vm.Throttles)
		}
		if vm.WakeP50US >= wakeCostlyUS {
			why += fmt.Sprintf(", wake-up p50 %s (costly blocking)", fmtUS(vm.WakeP50US))
		}
		return Recommendation{ActionHybridsync, why + ": isolation is in place but slices stay short; spin only within the remaining slice, block otherwise (run the GPU app under libhybridsync with the agent's hints)"}
	}
}

func syncOf(in StatsInput) SyncStats {
	s := in.Stats
	out := SyncStats{Source: in.Path, Mode: s.Mode, Calls: s.Calls, Kernels: len(s.Kernels), SpinS: s.SpinSeconds, BlockS: s.BlockSeconds,
		WakeLateUS: s.WakeLateUS, TimerLateUS: s.TimerLateUS, SliceUS: s.SliceUS, Deschedulings: s.Deschedulings}
	if s.Calls > 0 {
		n := float64(s.Calls)
		out.ReadyPct = 100 * float64(s.Ready) / n
		out.SpinHitPct = 100 * float64(s.SpinHits) / n
		out.SleepSpinPct = 100 * float64(s.SleepSpinHits) / n
		out.BlockPct = 100 * float64(s.Blocks) / n
	}
	return out
}

func gpusOf(in NVMLInput) []GPU {
	s := in.Series
	byGPU := map[int][]nvml.Sample{}
	for _, x := range s.Samples {
		byGPU[x.GPU] = append(byGPU[x.GPU], x)
	}
	idx := make([]int, 0, len(byGPU))
	for i := range byGPU {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var out []GPU
	for _, i := range idx {
		xs := byGPU[i]
		g := GPU{Source: in.Path, Index: i, Samples: len(xs)}
		for _, d := range s.Devices {
			if d.Index == i {
				g.Name = d.Name
			}
		}
		utils := make([]float64, len(xs))
		pids := map[uint32]bool{}
		idle := 0
		for j, x := range xs {
			utils[j] = float64(x.UtilPct)
			g.MeanUtilPct += float64(x.UtilPct)
			g.MeanSMMHz += float64(x.SMClockMHz)
			g.MaxMemUsedMB = math.Max(g.MaxMemUsedMB, float64(x.MemUsedBytes)/(1<<20))
			if x.UtilPct == 0 {
				idle++
			}
			for _, p := range x.Processes {
				pids[p.PID] = true
			}
		}
		g.MeanUtilPct /= float64(len(xs))
		g.MeanSMMHz /= float64(len(xs))
		g.P50UtilPct = stats.Median(utils)
		g.IdlePct = 100 * float64(idle) / float64(len(xs))
		g.SpanS = xs[len(xs)-1].Time.Sub(xs[0].Time).Seconds()
		g.Processes = len(pids)
		out = append(out, g)
	}
	return out
}

// fmtUS prints a duration given in µs in the unit a person reads best.
func fmtUS(us float64) string {
	switch {
	case us >= 1e6:
		return fmt.Sprintf("%.2f s", us/1e6)
	case us >= 1000:
		return fmt.Sprintf("%.2f ms", us/1000)
	case us >= 10:
		return fmt.Sprintf("%.0f µs", us)
	case us == 0:
		return "0"
	}
	return fmt.Sprintf("%.1f µs", us)
}

// FormatUS is fmtUS for renderers.
func FormatUS(us float64) string { return fmtUS(us) }
