package report

import (
	"time"

	"github.com/vgpu-probe/vgpu-probe/nvml"
	"github.com/vgpu-probe/vgpu-probe/profiler/agentapi"
	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/results/apptable"
	"github.com/vgpu-probe/vgpu-probe/results/decide"
)

// Version is the format version of the report's JSON. 2: a quantity no
// run measured is left out rather than written as 0, the verdict's
// margin is over the runner-up, and cells are named by compare.Label.
const Version = 2

// Report is everything a renderer draws.
type Report struct {
	Version     int          `json:"version"`
	Generated   time.Time    `json:"generated"`
	Sources     []string     `json:"sources"`
	Experiments []Experiment `json:"experiments,omitempty"`
	// Apps are apps' tables (apptable), computed here from the runs that
	// apps' and advise's results files and runs.jsonl files carry: the
	// files of one agent setting taken together, as apps --from FILE,...
	// takes them, so the paired ratios are the same numbers.
	Apps []AppsTable `json:"apps,omitempty"`
	// VMs are ranked by Score, most interfered with first.
	VMs   []VM        `json:"vms,omitempty"`
	Sync  []SyncStats `json:"sync,omitempty"`
	GPUs  []GPU       `json:"gpus,omitempty"`
	Notes []string    `json:"notes,omitempty"`

	// Traces are the per-step timelines of experiment cells, for the
	// HTML's CDFs and the Perfetto trace; too big for the JSON summary.
	Traces []Trace `json:"-"`
	// AgentTraces are switch timelines read from live agents.
	AgentTraces []AgentTrace `json:"-"`
	// GPUSeries are the NVML recordings as read.
	GPUSeries []GPUSeries `json:"-"`
}

// AppsTable is the table of the runs of some inputs taken together.
type AppsTable struct {
	Sources []string `json:"sources"`
	// Agent is the runs' agent setting (apps --with-agent); "" none.
	Agent    string         `json:"agent,omitempty"`
	Rows     []apptable.Row `json:"rows"`
	Failures []apptable.Run `json:"failures,omitempty"`
	// ForCPUSpeed compares the arms at the same CPU speed where the runs
	// gauge it (apptable.ForCPUSpeed).
	ForCPUSpeed []apptable.Adjusted `json:"for_cpu_speed,omitempty"`
}

// Experiment is one results file. Throughout the model, a quantity that
// no run measured is left out (omitted from the JSON, not shown by the
// renderers) rather than given as 0: apps times whole programs and counts
// no kernels, a --workload-cmd has no step timeline, a setting without a
// reference has no slowdown.
type Experiment struct {
	Source string `json:"source"`
	// Kind is the command that wrote the file (results.KindRun...).
	Kind     string          `json:"kind"`
	Workload string          `json:"workload"`
	Machine  results.Machine `json:"machine"`
	Backend  string          `json:"backend"`
	Device   string          `json:"device,omitempty"` // "": a program that picks its own (apps)
	Steps    int             `json:"steps,omitempty"`  // of the built-in loop; 0: not set
	Reps     int             `json:"reps"`
	Cells    []Cell          `json:"cells"`
	// Reference is the scenario whose fastest cell per vCPU count (and
	// program) every slowdown divides by; SlowdownIs says so in words,
	// References gives each reference's mode and time.
	Reference  string `json:"reference"`
	SlowdownIs string `json:"slowdown_is"`
	References string `json:"references"`
	// Scenarios define the scenario names of the cells ("shared1 = ...").
	Scenarios []string `json:"scenarios"`
	// BottomLine names the best mode of each setting and its margin over
	// the next; Warnings, the settings whose repetitions disagree by more
	// than that margin.
	BottomLine string   `json:"bottom_line"`
	Warnings   []string `json:"warnings,omitempty"`
	// Latency is the paper's Table II for the most contended setting.
	Latency *LatencyTable `json:"latency,omitempty"`
	Verdict Verdict       `json:"verdict"`
}

// Cell is one cell of an experiment with its derived figures; what was
// not measured is nil (or, for quantities a measurement never makes 0,
// 0) and left out of the JSON.
type Cell struct {
	results.Key
	// Name is compare.Label of the key: the one name every output gives
	// the cell.
	Name     string  `json:"name"`
	WallS    float64 `json:"wall_s"`
	MinWallS float64 `json:"min_wall_s"`
	MaxWallS float64 `json:"max_wall_s"`
	CPUS     float64 `json:"cpu_s"`
	// Slowdown is the cell's median time over its reference's
	// (Experiment.SlowdownIs; 0 without a reference), as compare
	// defines it for every output.
	Slowdown float64 `json:"slowdown,omitempty"`
	// Fastest marks the fastest mode of the cell's setting.
	Fastest bool `json:"fastest,omitempty"`
	// KernelsPerS: 0 where the run counted no kernels (apps, a
	// --workload-cmd).
	KernelsPerS float64 `json:"kernels_per_s,omitempty"`
	// GPUUtil is the share of wall time a kernel was running on each of
	// the runner's streams (one per runner vCPU): kernels per second per
	// stream times the mean kernel time; 0 where either is unknown.
	// GPUUtilDrop is 1 - GPUUtil / that of the same mode's
	// reference-scenario cell, nil where there is none to compare.
	GPUUtil     float64  `json:"gpu_util,omitempty"`
	GPUUtilDrop *float64 `json:"gpu_util_drop,omitempty"`
	// Latencies: nil where the run recorded none (results.Result.Latencies).
	LaunchP50US  *float64 `json:"launch_p50_us,omitempty"`
	LaunchP99US  *float64 `json:"launch_p99_us,omitempty"`
	ReceiveP50US *float64 `json:"receive_p50_us,omitempty"`
	ReceiveP99US *float64 `json:"receive_p99_us,omitempty"`
}

// Label names the cell: compare.Label, as every output does.
func (k Cell) Label() string { return k.Name }

// LatencyTable is Table II: per wait mode, the median delay between the
// host deciding to launch and the launch, and between a kernel's
// completion and the host noticing it, under the setting named by Setting,
// next to the same mode's baseline; and the mode's slowdown there (the
// cells' one slowdown).
//
// It is drawn only where the setting's cells recorded latencies.
type LatencyTable struct {
	Setting string `json:"setting"`
	// CycleUS is the baseline's mean step length: latencies are judged
	// against it, as the paper judges 30 ms against NAMD's 4.5 ms cycle;
	// 0 (omitted) where no cell counted its steps, and then no latency
	// is classed.
	CycleUS float64      `json:"cycle_us,omitempty"`
	Rows    []LatencyRow `json:"rows"`
}

// LatencyRow is one wait mode in Table II. The classes are judged on the
// p99; a latency that was not measured is nil, and its class "".
type LatencyRow struct {
	Mode                 string   `json:"mode"`
	LaunchUS             *float64 `json:"launch_p50_us,omitempty"`
	LaunchP99US          *float64 `json:"launch_p99_us,omitempty"`
	LaunchBaselineUS     *float64 `json:"launch_baseline_p50_us,omitempty"`
	LaunchBaselineP99US  *float64 `json:"launch_baseline_p99_us,omitempty"`
	LaunchClass          string   `json:"launch_class,omitempty"`
	ReceiveUS            *float64 `json:"receive_p50_us,omitempty"`
	ReceiveP99US         *float64 `json:"receive_p99_us,omitempty"`
	ReceiveBaselineUS    *float64 `json:"receive_baseline_p50_us,omitempty"`
	ReceiveBaselineP99US *float64 `json:"receive_baseline_p99_us,omitempty"`
	ReceiveClass         string   `json:"receive_class,omitempty"`
	Slowdown             float64  `json:"slowdown,omitempty"`
}

// Verdict says whether a workload is vulnerable to CPU sharing and why.
// SyncIntensive and Vulnerable are nil where no run counted kernels
// (apps times whole programs): the rate that decides them was not
// measured.
type Verdict struct {
	SyncIntensive *bool   `json:"sync_intensive,omitempty"`
	Vulnerable    *bool   `json:"vulnerable,omitempty"`
	KernelsPerS   float64 `json:"kernels_per_s,omitempty"` // baseline, best mode
	// SyncsPerKernel is waits per kernel launched (0: unknown).
	SyncsPerKernel float64 `json:"syncs_per_kernel,omitempty"`
	WorstSlowdown  float64 `json:"worst_slowdown,omitempty"`
	WorstCell      string  `json:"worst_cell,omitempty"`
	// BestMode is the fastest wait mode (by median) under the most contended setting,
	// RunnerUp the second; BestModeMargin is RunnerUp's time over
	// BestMode's, less 1 (the margin that decides between them).
	BestMode       string  `json:"best_mode,omitempty"`
	RunnerUp       string  `json:"runner_up,omitempty"`
	BestModeMargin float64 `json:"best_mode_margin,omitempty"`
	// BestModeSign is BestMode against every other mode of the setting,
	// repetition by repetition (decide.Fastest): its lead is settled
	// where BestModeSign.Ahead().
	BestModeSign decide.Sign `json:"best_mode_sign,omitzero"`
	Why          string      `json:"why"`
	// Hybrid says, where hybrid is not the best mode of a setting, by how
	// much and why (compare.Table.HybridNote): the verdict's last sentence.
	Hybrid string `json:"hybrid,omitempty"`
}

// IsVulnerable reports whether the verdict found the workload vulnerable
// (false where it could not judge).
func (v Verdict) IsVulnerable() bool { return v.Vulnerable != nil && *v.Vulnerable }

// Judged reports whether the verdict could judge vulnerability at all.
func (v Verdict) Judged() bool { return v.Vulnerable != nil }

// Recommendation actions.
const (
	ActionNothing       = "nothing to do"
	ActionDedicate      = "dedicate vCPUs"
	ActionBandwidth     = "enable CPU bandwidth control"
	ActionHybridsync    = "use hybridsync"
	ActionInsufficientD = "not enough data"
)

// VM is one target seen by an agent (a VM, or a pid/cgroup stand-in).
type VM struct {
	Source string `json:"source"`
	Name   string `json:"name"`
	Kind   string `json:"kind"`
	VCPUs  int    `json:"vcpus"`
	// StealPct is the mean share of wall time the vCPU threads were
	// runnable but not running; MaxStealPct the worst vCPU's.
	StealPct        float64 `json:"steal_pct"`
	MaxStealPct     float64 `json:"max_steal_pct"`
	PreemptionsPerS float64 `json:"preemptions_per_s"`
	RunP50US        float64 `json:"run_p50_us"`    // median over vCPUs
	OffCPUP50US     float64 `json:"offcpu_p50_us"` // worst vCPU
	OffCPUP99US     float64 `json:"offcpu_p99_us"` // worst vCPU
	WakeP50US       float64 `json:"wake_p50_us"`   // worst vCPU
	Throttles       uint64  `json:"throttles"`
	QuotaUS         int64   `json:"quota_us,omitempty"`
	PeriodUS        int64   `json:"period_us,omitempty"`
	TopCorunner     string  `json:"top_corunner,omitempty"`
	CorunnerWaitS   float64 `json:"corunner_wait_s,omitempty"`
	// Score ranks VMs: StealPct, the CPU time the VM wanted and did not get.
	Score          float64        `json:"score"`
	Recommendation Recommendation `json:"recommendation"`
}

// Recommendation is what to change for a VM, and the numbers behind it.
type Recommendation struct {
	Action string `json:"action"`
	Why    string `json:"why"`
}

// SyncStats summarises one hybridsync stats file.
type SyncStats struct {
	Source        string  `json:"source"`
	Mode          string  `json:"mode"`
	Calls         uint64  `json:"calls"`
	Kernels       int     `json:"kernels"`
	ReadyPct      float64 `json:"ready_pct"`
	SpinHitPct    float64 `json:"spin_hit_pct"`
	SleepSpinPct  float64 `json:"sleep_spin_pct"`
	BlockPct      float64 `json:"block_pct"`
	SpinS         float64 `json:"spin_s"`
	BlockS        float64 `json:"block_s"`
	WakeLateUS    float64 `json:"wake_late_us"`
	TimerLateUS   float64 `json:"timer_late_us"`
	SliceUS       float64 `json:"slice_us"`
	Deschedulings uint64  `json:"deschedulings"`
}

// GPU summarises one GPU's NVML samples.
type GPU struct {
	Source       string  `json:"source"`
	Index        int     `json:"index"`
	Name         string  `json:"name"`
	Samples      int     `json:"samples"`
	SpanS        float64 `json:"span_s"`
	MeanUtilPct  float64 `json:"mean_util_pct"`
	P50UtilPct   float64 `json:"p50_util_pct"`
	IdlePct      float64 `json:"idle_pct"` // share of samples at 0 %
	MeanSMMHz    float64 `json:"mean_sm_clock_mhz"`
	MaxMemUsedMB float64 `json:"max_mem_used_mib"`
	Processes    int     `json:"processes"` // distinct pids seen
}

// GPUSeries is one NVML recording and where it came from.
type GPUSeries struct {
	Source string
	*nvml.Series
}

// Trace is one cell's timeline window.
type Trace struct {
	Experiment int
	Key        results.Key
	Steps      []results.Step
	Threads    []results.ThreadTrack
}

// AgentTrace is one target's switch timeline from a live agent.
type AgentTrace struct {
	Source string
	Target string
	Events []agentapi.OffCPU
}
