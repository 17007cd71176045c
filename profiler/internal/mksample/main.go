// Command mksample makes a real results.json for the profiler's sample
// report and golden tests: it runs the NAMD-like workload
// (experiments/paper/workload) on the simulated GPU, pinned to one CPU, in the paper's three scenarios mapped onto one CPU:
//
//	baseline  the workload alone
//	shared1   a while(1) co-runner on the same CPU, no isolation
//	shared2   the same co-runner held to -cap-quota per -cap-period by a cgroup
//
// and, as root with tracefs, records every sched_switch on that CPU (a
// tracefs instance of its own, clock "mono", the clock the workload's
// timeline uses) so each cell carries the runner's and the co-runner's
// on/off-CPU intervals. It also writes the hybrid mode's hybridsync stats.
//
//	go run ./profiler/internal/mksample -o results.json -stats stats.json
package main

import (
	"cmp"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/experiments/cpucap"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/workload"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/clock"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/simdev"
	"github.com/vgpu-probe/vgpu-probe/internal/reexec"
	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/results/compare"
)

type options struct {
	out, stats       string
	steps, reps      int
	window           int
	modes            []string
	hostUS, kernelUS float64
	quota, period    time.Duration
	cpu              int
	trace            bool
}

func main() {
	reexec.Init()
	var o options
	var modes string
	flag.StringVar(&o.out, "o", "results.json", "results file to write")
	flag.StringVar(&o.stats, "stats", "", "also write the hybrid mode's hybridsync stats (shared1) here")
	flag.IntVar(&o.steps, "steps", 600, "steps per run")
	flag.IntVar(&o.reps, "reps", 3, "repetitions per cell (median kept)")
	flag.IntVar(&o.window, "window", 80, "steps of the median run kept as the cell's timeline")
	flag.StringVar(&modes, "modes", "spin,block,paper,hybrid", "wait modes")
	flag.Float64Var(&o.hostUS, "host-us", 200, "CPU work per step, µs")
	flag.Float64Var(&o.kernelUS, "kernel-us", 500, "kernel duration, µs")
	flag.DurationVar(&o.quota, "cap-quota", 10*time.Millisecond, "shared2: co-runner quota per period")
	flag.DurationVar(&o.period, "cap-period", 20*time.Millisecond, "shared2: bandwidth period")
	flag.IntVar(&o.cpu, "cpu", -1, "CPU to run on (default: the last one)")
	flag.BoolVar(&o.trace, "trace", true, "record on/off-CPU intervals with tracefs (root)")
	flag.Parse()
	o.modes = strings.Split(modes, ",")
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "mksample:", err)
		os.Exit(1)
	}
}

// pinned runs functions on one OS thread pinned to a CPU, as the workload
// child does.
type pinned struct {
	fn  chan func()
	tid chan int
}

func newPinned(cpu int) (*pinned, int, error) {
	p := &pinned{fn: make(chan func()), tid: make(chan int)}
	errc := make(chan error)
	go func() {
		runtime.LockOSThread()
		if err := corunner.Pin(cpu); err != nil {
			errc <- err
			return
		}
		errc <- nil
		p.tid <- unix.Gettid()
		for f := range p.fn {
			f()
		}
	}()
	if err := <-errc; err != nil {
		return nil, 0, err
	}
	return p, <-p.tid, nil
}

func (p *pinned) do(f func()) {
	done := make(chan struct{})
	p.fn <- func() { f(); close(done) }
	<-done
}

type rep struct {
	res    results.Result
	tracks []results.ThreadTrack
	stats  hybridsync.Stats
}

func run(o options) error {
	cpus, err := corunner.Online()
	if err != nil {
		return err
	}
	if o.cpu < 0 {
		o.cpu = cpus[len(cpus)-1]
	}
	th, tid, err := newPinned(o.cpu)
	if err != nil {
		return err
	}
	var work int64
	th.do(func() { work = workload.Calibrate(time.Duration(o.hostUS * 1e3)) })
	var tr *tracer
	if o.trace {
		if tr, err = newTracer(o.cpu); err != nil {
			return fmt.Errorf("tracefs: %w (run as root, or -trace=false)", err)
		}
		defer tr.close()
	}
	host, _ := os.Hostname()
	var uts unix.Utsname
	unix.Uname(&uts)
	f := &results.File{Created: time.Now().UTC().Truncate(time.Second),
		Machine: results.Machine{Hostname: host, CPUs: len(cpus), Kernel: unix.ByteSliceToString(uts.Release[:])},
		Config: results.Config{Backend: "local", Scenarios: []string{"baseline", "shared1", "shared2"}, Corunner: "while1",
			Corunners: []int{1}, VCPUs: []int{1}, Modes: o.modes, Device: "sim", Workload: "namd-like", Reps: o.reps,
			Steps: o.steps, HostUS: o.hostUS, KernelUS: o.kernelUS}}
	var hybridStats *hybridsync.Stats
	for _, sc := range []string{"baseline", "shared1", "shared2"} {
		var co *corunner.Process
		coTIDs := map[int]bool{}
		if sc != "baseline" {
			if co, err = corunner.Start("while1", []int{o.cpu}); err != nil {
				return err
			}
			if sc == "shared2" {
				cg, err := cpucap.Create(fmt.Sprintf("vgpu-probe-mksample-%d", os.Getpid()), o.quota, o.period)
				if err != nil {
					co.Stop()
					return err
				}
				defer cg.Remove()
				if err := cg.Add(co.Pid()); err != nil {
					co.Stop()
					return err
				}
			}
			time.Sleep(100 * time.Millisecond) // let the co-runner pin itself
			tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", co.Pid()))
			for _, t := range tasks {
				var n int
				fmt.Sscan(t.Name(), &n)
				coTIDs[n] = true
			}
		}
		reps := make(map[string][]rep)
		for range o.reps {
			for _, m := range o.modes {
				mode, err := hybridsync.ParseMode(m)
				if err != nil {
					return err
				}
				var r rep
				var runErr error
				th.do(func() {
					s := hybridsync.New(hybridsync.Config{Mode: mode})
					dev := workload.SimDevice{Dev: simdev.New(1)}
					cfg := workload.Config{Steps: o.steps, Work: work, Profile: simdev.Fixed("kernel", time.Duration(o.kernelUS*1e3), 0), Seed: 1, Timeline: true}
					if tr != nil {
						tr.start()
					}
					var ru0, ru1 unix.Rusage
					unix.Getrusage(unix.RUSAGE_THREAD, &ru0)
					t0 := clock.Now()
					r.res, runErr = workload.Run(cfg, dev, s.Sync)
					unix.Getrusage(unix.RUSAGE_THREAD, &ru1)
					if tr != nil {
						tr.stop()
					}
					r.res.CPUS = float64(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) / 1e9
					r.stats = s.Stats(func(hybridsync.KernelID) string { return "kernel" })
					if tr != nil && runErr == nil {
						r.tracks, runErr = tr.tracks(t0, tid, coTIDs)
					}
				})
				if runErr != nil {
					return fmt.Errorf("%s %s: %w", sc, m, runErr)
				}
				reps[m] = append(reps[m], r)
			}
		}
		if co != nil {
			co.Stop()
		}
		for _, m := range o.modes {
			rs := reps[m]
			byWall := slices.Clone(rs)
			slices.SortFunc(byWall, func(a, b rep) int { return cmp.Compare(a.res.WallS, b.res.WallS) })
			med := byWall[len(byWall)/2]
			all := make([]results.Result, len(rs))
			for i, r := range rs {
				all[i] = r.res
			}
			c := results.Cell{Key: results.Key{Scenario: sc, VCPUs: 1, Mode: m}, Median: workload.Median(all),
				MinWallS: byWall[0].res.WallS, MaxWallS: byWall[len(byWall)-1].res.WallS}
			if sc != "baseline" {
				c.Corunner, c.Corunners = "while1", 1
			}
			for _, r := range all {
				r.Timeline = nil
				c.Reps = append(c.Reps, r)
			}
			c.Timeline = window(med, o.window)
			c.Median.Timeline = nil
			c.KernelsPerS = float64(c.Median.Steps) / c.Median.WallS
			f.Cells = append(f.Cells, c)
			if sc == "shared1" && m == "hybrid" {
				st := med.stats
				hybridStats = &st
			}
		}
	}
	compare.SetSlowdowns(f)
	if err := results.Write(o.out, f); err != nil {
		return err
	}
	if o.stats != "" && hybridStats != nil {
		b, _ := jsonIndent(hybridStats)
		if err := results.WriteAtomic(o.stats, b); err != nil {
			return err
		}
	}
	return nil
}

// window keeps o.window steps from the middle of the run and the thread
// intervals overlapping them, clipped, so the file stays small.
func window(r rep, n int) *results.Timeline {
	steps := r.res.Timeline
	if len(steps) == 0 {
		return nil
	}
	lo := max(0, len(steps)/2-n/2)
	hi := min(len(steps), lo+n)
	w := steps[lo:hi]
	from, to := w[0].HostStart, w[len(w)-1].Noticed
	tl := &results.Timeline{Steps: w}
	for _, t := range r.tracks {
		out := results.ThreadTrack{Name: t.Name, TID: t.TID}
		for _, iv := range t.Intervals {
			if iv.End <= from || iv.Start >= to {
				continue
			}
			iv.Start, iv.End = max(iv.Start, from), min(iv.End, to)
			out.Intervals = append(out.Intervals, iv)
		}
		if len(out.Intervals) > 0 {
			tl.Threads = append(tl.Threads, out)
		}
	}
	return tl
}
