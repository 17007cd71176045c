package bench

import (
	"context"
	"fmt"
	"slices"

	"github.com/vgpu-probe/vgpu-probe/agent/hintfeed"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/experiments/cpucap"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/workload"
	"github.com/vgpu-probe/vgpu-probe/results"
)

// startFeed starts the agent in-process, before any cell runs, where the
// cells need it: to publish their hint page (hints asked for and no page
// given), to give them the slice (a mitigation), or both, in which case
// the page carries the slice of the cell's thread. Run closes it.
func (r *run) startFeed(ctx context.Context) error {
	publish := slices.Contains(r.Thresholds, workload.ThresholdHints) && r.HintsPage == ""
	if !publish && r.Mitigation == nil {
		return nil
	}
	f, err := hintfeed.Start(ctx, hintfeed.Options{Kind: targets.KindPID, Hints: publish, Mitigation: r.Mitigation})
	if err != nil {
		if publish {
			return fmt.Errorf("--threshold hints: %w", err)
		}
		return err
	}
	r.feed = f
	return nil
}

// cellName is the target name the in-process publisher gives every cell:
// one page, whose only thread changes from cell to cell.
const cellName = "bench-cell"

// setQuota records the contention setting's bandwidth limit, which the
// page reports.
func (r *run) setQuota(cg *cpucap.Group) {
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
	if r.feed != nil && r.feed.Hints() {
		cell.HintPage = r.feed.Path(cellName)
	}
	return cell
}

// runOne runs a cell, watched by the in-process publisher when it reads
// hints from it: the cell's loop thread becomes the page's only thread
// (with the mitigator's slice in its slot, if any) before its loop starts.
func (r *run) runOne(ctx context.Context, cell workload.Cell, cg *cpucap.Group) (results.Result, error) {
	if r.feed == nil || !r.feed.Hints() || cell.Threshold != workload.ThresholdHints {
		return workload.RunCell(ctx, cell, cg)
	}
	return workload.RunCellStarted(ctx, cell, cg, func(pid int) error {
		if err := r.feed.Watch(cellName, []int{pid}, r.quotaUS, r.periodUS); err != nil {
			return err
		}
		if r.watched != nil {
			r.watched(pid)
		}
		return nil
	})
}
