// Package perfetto renders a report's timelines as a Chrome trace-event
// JSON file (the "JSON Object Format" of the Trace Event Format), which
// ui.perfetto.dev and chrome://tracing open. It draws what the paper shows
// with Nsight in Figs. 7-9: per vCPU, when it ran and when it was off the
// CPU, who occupied the CPU instead, and beside it each step's host work,
// kernel launch, kernel run on the GPU and the sync wait with its mode.
//
// Layout: one process per experiment cell ("pid" = cell), with tracks
// (threads) for the host thread's steps, the GPU's kernels, and each
// thread's on/off-CPU intervals; a counter of co-runners on the CPU; one
// process per agent timeline (a track per vCPU) and one per NVML GPU
// (a utilisation counter). Timestamps are µs from the start of the run
// each timeline came from.
package perfetto

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/vgpu-probe/vgpu-probe/profiler/report"
	"github.com/vgpu-probe/vgpu-probe/results/compare"
)

// Event is one trace event. Fields follow the Trace Event Format; ts and
// dur are in microseconds.
type Event struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	TS   float64        `json:"ts"`
	Dur  *float64       `json:"dur,omitempty"`
	PID  int            `json:"pid"`
	TID  int            `json:"tid"`
	S    string         `json:"s,omitempty"` // scope of instant events
	Args map[string]any `json:"args,omitempty"`
}

// Trace is the file.
type Trace struct {
	TraceEvents     []Event `json:"traceEvents"`
	DisplayTimeUnit string  `json:"displayTimeUnit"`
}

// Track ids inside a cell's process: runner vCPU thread n's steps on
// tidHost+2n and its GPU stream on tidGPU+2n; on/off-CPU tracks from
// tidThreads; the co-runner occupancy counter on tidCorunner.
const (
	tidCorunner = 1
	tidHost     = 2
	tidGPU      = 3
	tidThreads  = 1000
)

// Render writes r's timelines as a trace.
func Render(w io.Writer, r *report.Report) error {
	t := Build(r)
	enc := json.NewEncoder(w)
	return enc.Encode(t)
}

// Build makes the trace of r.
func Build(r *report.Report) *Trace {
	b := &builder{}
	pid := 0
	for _, tr := range r.Traces {
		pid++
		b.cell(pid, tr, len(r.Experiments) > 1)
	}
	for _, at := range r.AgentTraces {
		pid++
		b.agent(pid, at)
	}
	for _, s := range r.GPUSeries {
		for _, d := range s.Devices {
			pid++
			b.meta(pid, 0, "process_name", fmt.Sprintf("GPU %d %s (NVML)", d.Index, d.Name))
			var t0 float64
			first := true
			for _, x := range s.Samples {
				if x.GPU != d.Index {
					continue
				}
				ts := float64(x.Time.UnixNano()) / 1e3
				if first {
					t0, first = ts, false
				}
				b.add(Event{Name: "GPU utilisation %", Ph: "C", TS: ts - t0, PID: pid, TID: 0,
					Args: map[string]any{"util": x.UtilPct, "mem": x.MemUtilPct}})
				b.add(Event{Name: "SM clock MHz", Ph: "C", TS: ts - t0, PID: pid, TID: 0, Args: map[string]any{"MHz": x.SMClockMHz}})
			}
		}
	}
	return &Trace{TraceEvents: b.evs, DisplayTimeUnit: "ms"}
}

type builder struct{ evs []Event }

func (b *builder) add(e Event) { b.evs = append(b.evs, e) }

func (b *builder) meta(pid, tid int, kind, name string) {
	b.add(Event{Name: kind, Ph: "M", PID: pid, TID: tid, Args: map[string]any{"name": name}})
}

func (b *builder) slice(pid, tid int, name, cat string, startNs, endNs int64, args map[string]any) {
	if endNs < startNs {
		return
	}
	d := float64(endNs-startNs) / 1e3
	b.add(Event{Name: name, Cat: cat, Ph: "X", TS: float64(startNs) / 1e3, Dur: &d, PID: pid, TID: tid, Args: args})
}

func (b *builder) cell(pid int, tr report.Trace, multi bool) {
	label := compare.Label(tr.Key)
	if multi {
		label = fmt.Sprintf("#%d %s", tr.Experiment+1, label)
	}
	b.meta(pid, 0, "process_name", label)
	b.add(Event{Name: "process_sort_index", Ph: "M", PID: pid, Args: map[string]any{"sort_index": pid}})
	mode := tr.Key.Mode
	named := map[int]bool{}
	for i, s := range tr.Steps {
		// Each runner vCPU thread has its own host track and its own
		// GPU stream track, so that slices on one track never overlap.
		host, gpu := tidHost+2*s.Thread, tidGPU+2*s.Thread
		if !named[s.Thread] {
			named[s.Thread] = true
			b.meta(pid, host, "thread_name", fmt.Sprintf("runner vcpu%d: steps", s.Thread))
			b.meta(pid, gpu, "thread_name", fmt.Sprintf("GPU stream %d: kernels", s.Thread))
		}
		b.slice(pid, host, "host work", "host", s.HostStart, s.HostEnd, map[string]any{"step": i})
		if s.Launch > s.HostEnd {
			b.slice(pid, host, "launch", "launch", s.HostEnd, s.Launch,
				map[string]any{"step": i, "launch_latency_us": float64(s.Launch-s.HostEnd) / 1e3})
		}
		// The mode asked for, and, where the runner measured it, what the
		// thread actually did while it waited (spun, blocked...).
		name := "sync wait (" + mode + ")"
		args := map[string]any{"step": i, "mode": mode, "kernel": s.Kernel}
		if s.Wait != "" {
			name = fmt.Sprintf("sync wait (%s: %s)", mode, s.Wait)
			args["waited_by"] = s.Wait
		}
		if s.Complete >= 0 {
			args["receive_latency_us"] = float64(s.Noticed-s.Complete) / 1e3
		}
		b.slice(pid, host, name, "sync", s.Launch, s.Noticed, args)
		b.add(Event{Name: "launch " + s.Kernel, Cat: "launch", Ph: "i", S: "t", TS: float64(s.Launch) / 1e3, PID: pid, TID: gpu,
			Args: map[string]any{"step": i}})
		if s.Complete >= 0 {
			b.slice(pid, gpu, "kernel "+s.Kernel, "kernel", s.Launch, s.Complete, map[string]any{"step": i})
			b.add(Event{Name: "complete " + s.Kernel, Cat: "complete", Ph: "i", S: "t", TS: float64(s.Complete) / 1e3, PID: pid, TID: gpu,
				Args: map[string]any{"step": i, "noticed_after_us": float64(s.Noticed-s.Complete) / 1e3}})
		}
	}
	type edge struct {
		t     int64
		delta int
	}
	var occ []edge
	for i, th := range tr.Threads {
		tid := tidThreads + i
		b.meta(pid, tid, "thread_name", fmt.Sprintf("%s (tid %d)", th.Name, th.TID))
		corunner := strings.HasPrefix(th.Name, "corunner")
		for _, iv := range th.Intervals {
			name, cat := "off CPU", "off"
			if iv.On {
				name, cat = "running", "on"
				if corunner {
					occ = append(occ, edge{iv.Start, 1}, edge{iv.End, -1})
				}
			}
			b.slice(pid, tid, name, cat, iv.Start, iv.End, nil)
		}
	}
	if len(occ) > 0 {
		// A counter of co-runner threads on CPU: the occupancy that
		// keeps the runner's vCPU off.
		sort.SliceStable(occ, func(i, j int) bool { return occ[i].t < occ[j].t })
		n := 0
		for i, e := range occ {
			n += e.delta
			if i+1 < len(occ) && occ[i+1].t == e.t {
				continue
			}
			b.add(Event{Name: "co-runners on CPU", Ph: "C", TS: float64(e.t) / 1e3, PID: pid, TID: tidCorunner, Args: map[string]any{"threads": n}})
		}
	}
}

// agent draws an agent timeline: per thread, each off-CPU interval
// ("off CPU", naming who ran instead and whether it was a preemption or a
// quota throttle) and the run that preceded it ("running"), clipped so
// that slices on a track never overlap.
func (b *builder) agent(pid int, at report.AgentTrace) {
	b.meta(pid, 0, "process_name", fmt.Sprintf("%s @ %s (agent)", at.Target, at.Source))
	if len(at.Events) == 0 {
		return
	}
	evs := slices.Clone(at.Events)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].StartNs < evs[j].StartNs })
	t0 := evs[0].StartNs
	for _, e := range evs {
		if e.RunUS > 0 {
			t0 = min(t0, e.StartNs-min(e.StartNs, uint64(e.RunUS*1e3)))
		}
	}
	lastEnd := map[uint32]int64{}
	for _, e := range evs {
		if _, ok := lastEnd[e.TID]; !ok {
			name := fmt.Sprintf("tid %d", e.TID)
			if e.VCPU >= 0 {
				name = fmt.Sprintf("vcpu%d (tid %d)", e.VCPU, e.TID)
			}
			b.meta(pid, int(e.TID), "thread_name", name)
			lastEnd[e.TID] = 0
		}
		start, end := int64(e.StartNs-t0), int64(e.EndNs-t0)
		if start < lastEnd[e.TID] {
			continue // overlaps the previous interval: a duplicate or a gap in the ring
		}
		if e.RunUS > 0 {
			runStart := max(lastEnd[e.TID], start-int64(e.RunUS*1e3))
			b.slice(pid, int(e.TID), "running", "on", runStart, start, nil)
		}
		args := map[string]any{"preempted": e.Preempted, "throttled": e.Throttled, "waited_for_cpu": e.Waited, "cpu": e.CPU}
		if e.OtherComm != "" {
			args["ran_instead"] = e.OtherComm
		}
		b.slice(pid, int(e.TID), "off CPU", "off", start, end, args)
		lastEnd[e.TID] = end
	}
}
