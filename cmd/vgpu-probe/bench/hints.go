package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/experiments/cgroup"
	"github.com/vgpu-probe/vgpu-probe/experiments/hintfeed"
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
		if !slices.Contains(workload.Thresholds, t) {
			return fmt.Errorf("--threshold: unknown source %q (want %s)", t, strings.Join(workload.Thresholds, ", "))
		}
	}
	if o.HintsPage != "" && !slices.Contains(o.Thresholds, workload.ThresholdHints) {
		return fmt.Errorf("--hints-page is for --threshold hints")
	}
	return nil
}

// startHints publishes the cells' hint page in-process when hints are
// asked for and no page was given; the returned function stops it.
func (o *Options) startHints(ctx context.Context) (func(), error) {
	if !slices.Contains(o.Thresholds, workload.ThresholdHints) || o.HintsPage != "" {
		return func() {}, nil
	}
	if os.Geteuid() != 0 {
		return nil, usage.Errorf("--threshold hints publishes the hint page with the agent's eBPF programs, which needs root (or give --hints-page)")
	}
	f, err := hintfeed.Start(ctx, targets.KindPID, "")
	if err != nil {
		return nil, fmt.Errorf("--threshold hints: %w", err)
	}
	o.feed = f
	return f.Close, nil
}

// cellName is the target name the in-process publisher gives every cell:
// one page, whose only thread changes from cell to cell.
const cellName = "bench-cell"

// setQuota records the contention setting's bandwidth limit, which the
// page reports.
func (o *Options) setQuota(cg *cgroup.Group) {
	o.quotaUS, o.periodUS = 0, 0
	if cg != nil {
		o.quotaUS, o.periodUS = o.CapQuota.Microseconds(), o.CapPeriod.Microseconds()
	}
}

// hintCell points a hints cell at its page.
func (o *Options) hintCell(cell workload.Cell) workload.Cell {
	if cell.Threshold != workload.ThresholdHints {
		return cell
	}
	cell.HintPage = o.HintsPage
	if o.feed != nil {
		cell.HintPage = o.feed.Path(cellName)
	}
	return cell
}

// runOne runs a cell, watched by the in-process publisher when it reads
// hints from it: the cell's loop thread becomes the page's only thread
// before its loop starts.
func (o *Options) runOne(ctx context.Context, cell workload.Cell, cg *cgroup.Group) (workload.Result, error) {
	if o.feed == nil || cell.Threshold != workload.ThresholdHints {
		return workload.RunCell(ctx, cell, cg)
	}
	return workload.RunCellStarted(ctx, cell, cg, func(pid int) error {
		return o.feed.Watch(cellName, []int{pid}, o.quotaUS, o.periodUS)
	})
}
