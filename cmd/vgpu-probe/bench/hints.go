package bench

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/hints"
	"github.com/vgpu-probe/vgpu-probe/agent/monitor"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/experiments/cgroup"
	"github.com/vgpu-probe/vgpu-probe/experiments/workload"
)

func addThresholdFlags(f *pflag.FlagSet, o *Options) {
	f.StringSliceVar(&o.Thresholds, "threshold", []string{workload.ThresholdGuest},
		"where the wait takes the remaining time slice from: hints (the agent's hint page), guest (the guest-only estimate), static (the paper's fixed 10 ms); overrides HYBRIDSYNC_HINTS and HYBRIDSYNC_MAX_SPIN_US in the cells")
	f.StringVar(&o.HintsPage, "hints-page", "", "with --threshold hints: read this page (a running agent's, or the guest's "+
		"/dev/shm/vgpu-probe-hints) instead of publishing one in-process (which needs root)")
}

// parseThresholds checks --threshold and --hints-page.
func (o *Options) parseThresholds() error {
	for _, t := range o.Thresholds {
		if !contains(workload.Thresholds, t) {
			return fmt.Errorf("--threshold: unknown source %q (want %s)", t, strings.Join(workload.Thresholds, ", "))
		}
	}
	if o.HintsPage != "" && !contains(o.Thresholds, workload.ThresholdHints) {
		return fmt.Errorf("--hints-page is for --threshold hints")
	}
	return nil
}

// startHints publishes the cells' hint page in-process when hints are
// asked for and no page was given; the returned function stops it.
func (o *Options) startHints(ctx context.Context) (func(), error) {
	if !contains(o.Thresholds, workload.ThresholdHints) || o.HintsPage != "" {
		return func() {}, nil
	}
	if os.Geteuid() != 0 {
		return nil, usage.Errorf("--threshold hints publishes the hint page with the agent's eBPF programs, which needs root (or give --hints-page)")
	}
	f, err := startFeed(ctx)
	if err != nil {
		return nil, fmt.Errorf("--threshold hints: %w", err)
	}
	o.feed = f
	return f.close, nil
}

// cellName is the target name the in-process publisher gives every cell:
// one page, whose only thread changes from cell to cell.
const cellName = "bench-cell"

// feed is the agent's hint pipeline (eBPF programs, monitor, publisher)
// in-process, wired as `vgpu-probe agent --hints` wires it, watching one
// benchmark cell at a time.
type feed struct {
	dir    string
	probe  *bpfload.Probe
	mon    *monitor.Monitor
	pub    *hints.Publisher
	cancel context.CancelFunc
	done   chan struct{}
	// quota is the cells' CPU bandwidth, which the page reports.
	quotaUS, periodUS int64
	// published counts the switch-in records of cells the publisher
	// applied, once closed.
	published int
}

func startFeed(ctx context.Context) (*feed, error) {
	base := hints.DefaultDir
	if _, err := os.Stat(base); err != nil {
		base = os.TempDir()
	}
	dir, err := os.MkdirTemp(base, "vgpu-probe-bench-")
	if err != nil {
		return nil, err
	}
	f := &feed{dir: dir, done: make(chan struct{})}
	if f.pub, err = hints.New(hints.Options{Dir: dir, Log: zerolog.Nop()}); err == nil {
		f.probe, err = bpfload.Load(bpfload.Options{Events: true, WakeEveryEvent: true, Self: uint32(os.Getpid()), Log: zerolog.Nop()})
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	f.pub.SetCounters(f.probe)
	f.mon = monitor.New(f.probe, monitor.Options{Log: zerolog.Nop(), OnEvent: f.pub.OnEvent})
	ctx, f.cancel = context.WithCancel(ctx)
	go func() { defer close(f.done); f.mon.Run(ctx) }()
	go f.pub.Run(ctx)
	return f, nil
}

// page is where the cells read their hints.
func (f *feed) page() string { return f.pub.Path(cellName) }

// watch makes the cell whose loop thread is pid the page's only thread;
// Apply is synchronous, so the thread is watched before its loop starts.
func (f *feed) watch(pid int) error {
	ev := targets.Event{Kind: targets.Added, Target: targets.Target{Kind: targets.KindPID, Name: cellName,
		Threads: []targets.Thread{{TID: pid, VCPU: -1}}, QuotaUS: f.quotaUS, PeriodUS: f.periodUS}}
	f.pub.Apply(ev)
	f.mon.Apply(ev)
	if _, err := os.Stat(f.page()); err != nil {
		return fmt.Errorf("no hint page for cell %d: %w", pid, err)
	}
	return nil
}

func (f *feed) close() {
	f.cancel()
	<-f.done
	f.published = f.pub.Applied()
	f.pub.Close()
	f.probe.Close()
	os.RemoveAll(f.dir)
}

// setQuota records the contention setting's bandwidth limit for the page.
func (f *feed) setQuota(cg *cgroup.Group, quotaUS, periodUS int64) {
	if f == nil {
		return
	}
	f.quotaUS, f.periodUS = 0, 0
	if cg != nil {
		f.quotaUS, f.periodUS = quotaUS, periodUS
	}
}

// hintCell points a hints cell at its page.
func (o *Options) hintCell(cell workload.Cell) workload.Cell {
	if cell.Threshold != workload.ThresholdHints {
		return cell
	}
	cell.HintPage = o.HintsPage
	if o.feed != nil {
		cell.HintPage = o.feed.page()
	}
	return cell
}

// runOne runs a cell, watched by the in-process publisher when it reads
// hints from it.
func (o *Options) runOne(ctx context.Context, cell workload.Cell, cg *cgroup.Group) (workload.Result, error) {
	if o.feed == nil || cell.Threshold != workload.ThresholdHints {
		return workload.RunCell(ctx, cell, cg)
	}
	return workload.RunCellStarted(ctx, cell, cg, o.feed.watch)
}
