package results

import "github.com/vgpu-probe/vgpu-probe/hybridsync/signal"

// Step is one step's timeline, in ns since the run started: a step of the
// benchmark's loop (experiments/paper/workload), as results files keep it.
type Step struct {
	HostStart int64  `json:"host_start"`
	HostEnd   int64  `json:"host_end"`
	Launch    int64  `json:"launch"`
	Complete  int64  `json:"complete"` // -1 when the device does not report it
	Noticed   int64  `json:"noticed"`
	Kernel    string `json:"kernel"`
	// Thread is the loop thread (vCPU) the step ran on; workload.RunThreads only.
	Thread int `json:"thread,omitempty"`
	// Wait is what the thread did while waiting (workload.WaitSpin, WaitBlock...),
	// measured from its CPU time; workload.RunThreads only.
	Wait string `json:"wait,omitempty"`
}

// Result is what one run of the loop measured: a cell's repetitions and
// its median. Steps and the latency percentiles are 0, and left out of
// the file, where the run did not measure them: a command timed whole
// (run --workload-cmd, apps' programs) counts no steps of a loop that
// vgpu-probe runs and sees no launch or completion. Readers tell a
// measured run by Latencies.
type Result struct {
	WallS        float64 `json:"wall_s"`
	CPUS         float64 `json:"cpu_s"` // filled in by whoever can measure the process
	Steps        int     `json:"steps,omitempty"`
	ReceiveP50US float64 `json:"receive_p50_us,omitempty"`
	ReceiveP99US float64 `json:"receive_p99_us,omitempty"`
	LaunchP50US  float64 `json:"launch_p50_us,omitempty"`
	LaunchP99US  float64 `json:"launch_p99_us,omitempty"`
	Timeline     []Step  `json:"timeline,omitempty"`
	// StartNs is when the loop started on CLOCK_MONOTONIC (the clock
	// the kernel's scheduler events use), to line the timeline up with
	// an agent's; workload.RunThreads only.
	StartNs int64 `json:"start_ns,omitempty"`
	// TIDs are the loop threads' thread ids, vCPU i first; workload.RunThreads only.
	TIDs []int `json:"tids,omitempty"`
	// Hints counts the calls the host's hint page answered and, by
	// reason, those that fell back, where the loop read one (the libvirt
	// backend's guest under run --hints).
	Hints *signal.HintStats `json:"hints,omitempty"`
	// Rep is the repetition, from 1, where the writer numbers them, so
	// that the modes of a setting pair by repetition though some failed;
	// 0: the result's place among its cell's Reps is its repetition.
	Rep int `json:"rep,omitempty"`
}

// Latencies reports whether r measured its launch and receive latencies: a
// loop that times its steps gives every percentile a value above 0 (a
// step takes at least the clock's read between host work and launch, and
// between a completion and its notice), a run that does not leaves all
// four at 0.
func (r Result) Latencies() bool {
	return r.LaunchP50US > 0 || r.LaunchP99US > 0 || r.ReceiveP50US > 0 || r.ReceiveP99US > 0
}
