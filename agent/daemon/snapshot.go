package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/vgpu-probe/vgpu-probe/agent/model"
	"github.com/vgpu-probe/vgpu-probe/agent/monitor"
)

// once measures for c.Once and prints one snapshot.
func (c *Config) once(ctx context.Context, m *monitor.Monitor) error {
	// pid and cgroup targets exist by now (their sources checked them);
	// wait for the monitor to have taken them in before the clock starts.
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	err := m.WaitTargets(wctx, len(c.PIDs)+len(c.Cgroups))
	wcancel()
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("starting to watch targets: %w", err)
	}
	select {
	case <-time.After(c.Once):
	case <-ctx.Done():
		// Interrupted: still print what was measured so far.
	}
	snap := m.Snapshot()
	if c.JSON {
		enc := json.NewEncoder(c.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(snap); err != nil {
			return fmt.Errorf("writing snapshot: %w", err)
		}
		return nil
	}
	return writeTable(c.Out, &snap)
}

// writeTable prints one row per thread; a "gone" column, there only when
// something went, says how long before the snapshot each gone thread went.
func writeTable(w io.Writer, snap *model.Snapshot) error {
	anyGone := slices.ContainsFunc(snap.Targets, func(t model.Target) bool {
		return slices.ContainsFunc(t.Threads, func(th model.Thread) bool { return th.Gone })
	})
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "target\tkind\ttid\tvcpu\trun s\toff s\tpreempt\trun p50 µs\toff p50 µs\twake p50 µs\tsteal\tslice µs\t")
	if anyGone {
		fmt.Fprintf(tw, "gone\t")
	}
	fmt.Fprintln(tw)
	for _, t := range snap.Targets {
		for _, th := range t.Threads {
			vcpu := "-"
			if th.VCPU >= 0 {
				vcpu = strconv.Itoa(th.VCPU)
			}
			slice := "inf"
			if th.ExpectedSliceUS != nil {
				slice = fmt.Sprintf("%.0f", *th.ExpectedSliceUS)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%.3f\t%.3f\t%d\t%.0f\t%.0f\t%.1f\t%.2f\t%s\t",
				t.Name, t.Kind, th.TID, vcpu, th.RunSeconds, th.OffCPUSeconds, th.Preemptions,
				th.RunP50US, th.OffCPUP50US, th.WakeP50US, th.StealFraction, slice)
			if anyGone {
				fmt.Fprintf(tw, "%s\t", goneCell(snap.Time, &th))
			}
			fmt.Fprintln(tw)
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	return nil
}

// goneCell is "-" for a live thread, else how long before the snapshot it
// went ("1.5s ago").
func goneCell(at time.Time, th *model.Thread) string {
	if !th.Gone {
		return "-"
	}
	return fmt.Sprintf("%.1fs ago", max(0, at.Sub(th.GoneAt).Seconds()))
}
