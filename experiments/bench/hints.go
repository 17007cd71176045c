package bench

import (
	"context"
	"fmt"
	"slices"

	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/experiments/cgroup"
	"github.com/vgpu-probe/vgpu-probe/experiments/hintfeed"
	"github.com/vgpu-probe/vgpu-probe/experiments/workload"
	"github.com/vgpu-probe/vgpu-probe/results"
)

// startHints publishes the cells' hint page in-process when hints are
// asked for and no page was given; Run closes it.
func (r *run) startHints(ctx context.Context) error {
	if !slices.Contains(r.Thresholds, workload.ThresholdHints) || r.HintsPage != "" {
		return nil
	}
	f, err := hintfeed.Start(ctx, targets.KindPID, "")
	if err != nil {
		return fmt.Errorf("--threshold hints: %w", err)
	}
	r.feed = f
	return nil
}

// cellName is the target name the in-process publisher gives every cell:
// one page, whose only thread changes from cell to cell.
const cellName = "bench-cell"

// setQuota records the contention setting's bandwidth limit, which the
// page reports.
func (r *run) setQuota(cg *cgroup.Group) {
	r.quotaUS, r.periodUS = 0, 0
	if cg != nil {
		r.quotaUS, r.periodUS = r.CapQuota.Microseconds(), r.CapPeriod.Microseconds()
	}
}

// hintCell points a hints cell at its page.
func (r *run) hintCell(cell workload.Cell) workload.Cell {
	if cell.Threshold != workload.ThresholdHints {
		return cell
	}
	cell.HintPage = r.HintsPage
	if r.feed != nil {
		cell.HintPage = r.feed.Path(cellName)
	}
	return cell
}

// runOne runs a cell, watched by the in-process publisher when it reads
// hints from it: the cell's loop thread becomes the page's only thread
// before its loop starts.
func (r *run) runOne(ctx context.Context, cell workload.Cell, cg *cgroup.Group) (results.Result, error) {
	if r.feed == nil || cell.Threshold != workload.ThresholdHints {
		return workload.RunCell(ctx, cell, cg)
	}
	return workload.RunCellStarted(ctx, cell, cg, func(pid int) error {
		return r.feed.Watch(cellName, []int{pid}, r.quotaUS, r.periodUS)
	})
}
