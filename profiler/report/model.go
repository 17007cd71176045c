package report

import (
	"time"

	"github.com/vgpu-probe/vgpu-probe/nvml"
	"github.com/vgpu-probe/vgpu-probe/profiler/agentapi"
	"github.com/vgpu-probe/vgpu-probe/results"
)

// Version is the format version of the report's JSON.
const Version = 1

// Report is everything a renderer draws.
type Report struct {
	Version     int          `json:"version"`
	Generated   time.Time    `json:"generated"`
	Sources     []string     `json:"sources"`
	Experiments []Experiment `json:"experiments,omitempty"`
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

// Experiment is one results file.
type Experiment struct {
	Source string `json:"source"`
	// Kind is the command that wrote the file (results.KindRun...).
	Kind     string          `json:"kind"`
	Workload string          `json:"workload"`
	Machine  results.Machine `json:"machine"`
	Backend  string          `json:"backend"`
	Device   string          `json:"device"`
	Steps    int             `json:"steps"`
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

// Cell is one cell of an experiment with its derived figures.
type Cell struct {
	results.Key
	WallS    float64 `json:"wall_s"`
	MinWallS float64 `json:"min_wall_s"`
	MaxWallS float64 `json:"max_wall_s"`
	CPUS     float64 `json:"cpu_s"`
	// Slowdown is the cell's median time over its reference's
	// (Experiment.SlowdownIs; 0 without a reference), as compare
	// defines it for every output.
	Slowdown float64 `json:"slowdown"`
	// Fastest marks the fastest mode of the cell's setting.
	Fastest     bool    `json:"fastest,omitempty"`
	KernelsPerS float64 `json:"kernels_per_s"`
	// GPUUtil is the share of wall time a kernel was running on each of
	// the runner's streams (one per runner vCPU): kernels per second per
	// stream times the mean kernel time. GPUUtilDrop is 1 - GPUUtil / that
	// of the same mode's reference-scenario cell.
	GPUUtil      float64 `json:"gpu_util"`
	GPUUtilDrop  float64 `json:"gpu_util_drop"`
	LaunchP50US  float64 `json:"launch_p50_us"`
	LaunchP99US  float64 `json:"launch_p99_us"`
	ReceiveP50US float64 `json:"receive_p50_us"`
	ReceiveP99US float64 `json:"receive_p99_us"`
}

// Label names a cell the way the figures do.
func (k Cell) Label() string { return KeyLabel(k.Key) }

// LatencyTable is Table II: per wait mode, the median delay between the
// host deciding to launch and the launch, and between a kernel's
// completion and the host noticing it, under the setting named by Setting,
// next to the same mode's baseline; and the mode's slowdown there (the
// cells' one slowdown).
type LatencyTable struct {
	Setting string `json:"setting"`
	// CycleUS is the baseline's mean step length: latencies are judged
	// against it, as the paper judges 30 ms against NAMD's 4.5 ms cycle.
	CycleUS float64      `json:"cycle_us"`
	Rows    []LatencyRow `json:"rows"`
}

// LatencyRow is one wait mode in Table II. The classes are judged on the
// p99.
type LatencyRow struct {
	Mode                 string  `json:"mode"`
	LaunchUS             float64 `json:"launch_p50_us"`
	LaunchP99US          float64 `json:"launch_p99_us"`
	LaunchBaselineUS     float64 `json:"launch_baseline_p50_us"`
	LaunchBaselineP99US  float64 `json:"launch_baseline_p99_us"`
	LaunchClass          string  `json:"launch_class"`
	ReceiveUS            float64 `json:"receive_p50_us"`
	ReceiveP99US         float64 `json:"receive_p99_us"`
	ReceiveBaselineUS    float64 `json:"receive_baseline_p50_us"`
	ReceiveBaselineP99US float64 `json:"receive_baseline_p99_us"`
	ReceiveClass         string  `json:"receive_class"`
	Slowdown             float64 `json:"slowdown"`
}

// Verdict says whether a workload is vulnerable to CPU sharing and why.
type Verdict struct {
	SyncIntensive bool    `json:"sync_intensive"`
	Vulnerable    bool    `json:"vulnerable"`
	KernelsPerS   float64 `json:"kernels_per_s"` // baseline, best mode
	// SyncsPerKernel is waits per kernel launched (0: unknown).
	SyncsPerKernel float64 `json:"syncs_per_kernel"`
	WorstSlowdown  float64 `json:"worst_slowdown"`
	WorstCell      string  `json:"worst_cell,omitempty"`
	// BestMode is the fastest wait mode under the most contended setting.
	BestMode        string  `json:"best_mode,omitempty"`
	BestModeVsWorst float64 `json:"best_mode_speedup,omitempty"`
	Why             string  `json:"why"`
}

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
