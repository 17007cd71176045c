// Package bench runs the NAMD-like sync benchmark over a matrix of CPU
// contention settings x threshold sources x wait modes, each cell in a
// process of its own pinned to one CPU, and prints the result table.
// Everything a run sets up (co-runners, cgroups, the hint publisher) is
// torn down when it returns, also when its context is cancelled; the cells
// finished by then are returned.
package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/vgpu-probe/vgpu-probe/agent/hintfeed"
	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/experiments/cpucap"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/workload"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/simdev"
	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/results/stats"
)

// Options is one benchmark matrix.
type Options struct {
	Device      string
	Modes       []hybridsync.Mode
	Contentions []string // corunner.Contentions
	Thresholds  []string // workload.Thresholds
	Steps, Reps int
	HostWork    time.Duration // CPU work per step, calibrated once on CPU
	Profile     simdev.Profile
	// CapQuota per CapPeriod is the bandwidth limit of the cap settings.
	CapQuota, CapPeriod time.Duration
	CPU                 int // the benchmark's and the co-runner's CPU
	// HintsPage is the page the hints cells read; "" publishes one
	// in-process (the agent's eBPF programs: root).
	HintsPage string
	// Mitigation, when set, gives each cell's threads a short EEVDF slice.
	Mitigation *mitigate.Config
	Progress   Progress
}

// Progress is told about the cells as they run.
type Progress interface {
	Begin(total int)
	Next(desc string)
	Advance()
}

// Cells is how many cells (rows) the matrix has.
func (o *Options) Cells() int { return len(o.Contentions) * len(o.Thresholds) * len(o.Modes) }

// Row is one cell of the output (results.BenchRow): medians over the
// repetitions.
type Row = results.BenchRow

// run is one Run's state: what it started, for the cells to use.
type run struct {
	*Options
	work int64
	// feed is the agent in-process: the cells' hint page where it is
	// published here, the cells' slice with a mitigation; nil if neither.
	feed *hintfeed.Feed
	// watched, in tests, is called once a hints cell's process is on
	// its page, before its loop starts.
	watched    func(pid int)
	quotaUS    int64 // the current setting's bandwidth limit,
	periodUS   int64 // which the hint page reports
	cgroupName string
}

// Run runs the matrix and returns its rows. On failure or cancellation it
// returns the rows of the cells that finished with the error.
func Run(ctx context.Context, o Options) ([]Row, error) {
	return newRun(o).do(ctx)
}

func newRun(o Options) *run {
	return &run{Options: &o, cgroupName: fmt.Sprintf("vgpu-probe-bench-%d", os.Getpid())}
}

func (r *run) do(ctx context.Context) ([]Row, error) {
	o := r.Options
	if err := r.startFeed(ctx); err != nil {
		return nil, err
	}
	if r.feed != nil {
		defer r.feed.Close()
	}
	r.work = workload.CalibrateOn(o.CPU, o.HostWork)
	o.Progress.Begin(o.Cells() * o.Reps)
	var rows []Row
	for _, c := range o.Contentions {
		rs, err := r.runContention(ctx, c)
		rows = append(rows, rs...)
		if err != nil {
			return rows, err
		}
	}
	return rows, nil
}

// runContention sets up one contention setting, runs every cell and
// repetition under it, and tears the setting down again. It returns the
// cells that finished all their repetitions.
func (r *run) runContention(ctx context.Context, contention string) ([]Row, error) {
	setting, err := corunner.Setup(contention, r.CPU, r.cgroupName, r.CapQuota, r.CapPeriod)
	if err != nil {
		return nil, err
	}
	defer setting.Close()
	r.setQuota(setting.Group)
	n := len(r.Thresholds) * len(r.Modes)
	measured := make([][]results.Result, n)
	shares := make([][]float64, n)
	// Modes and thresholds interleave within each repetition, so that a
	// slow patch of the machine hits every one alike.
	err = func() error {
		for range r.Reps {
			for i := range n {
				if err := ctx.Err(); err != nil {
					return err
				}
				thr, m := r.Thresholds[i/len(r.Modes)], r.Modes[i%len(r.Modes)]
				r.Progress.Next(fmt.Sprintf("%-10s %-9s %-6s", contention, m, thr))
				cell := workload.Cell{Config: workload.Config{Steps: r.Steps, Work: r.work, Profile: r.Profile, Seed: 1},
					Mode: m, Device: r.Device, CPU: r.CPU, Threshold: thr}
				co0, hasCo := setting.CPU()
				start := time.Now()
				res, err := r.runCell(ctx, r.hintCell(cell), setting.Group)
				if err != nil {
					return err
				}
				measured[i] = append(measured[i], res)
				if co1, _ := setting.CPU(); hasCo {
					shares[i] = append(shares[i], (co1-co0).Seconds()/time.Since(start).Seconds())
				}
				r.Progress.Advance()
			}
		}
		return nil
	}()
	var rows []Row
	for i := range n {
		if len(measured[i]) < r.Reps {
			continue
		}
		m := workload.Median(measured[i])
		rows = append(rows, Row{Contention: contention, Mode: r.Modes[i%len(r.Modes)].String(), Threshold: r.Thresholds[i/len(r.Modes)],
			WallS: m.WallS, CPUS: m.CPUS, Steps: m.Steps,
			ReceiveP50US: m.ReceiveP50US, ReceiveP99US: m.ReceiveP99US, LaunchP50US: m.LaunchP50US, LaunchP99US: m.LaunchP99US,
			CorunnerShare: stats.Median(shares[i]), Reps: measured[i]})
	}
	return rows, err
}

// runCell runs one cell; with a mitigation its process is started from a
// thread with the slice, so that the cell and every thread it makes
// (CUDA's included) have it from the start, and only for the cell's life.
func (r *run) runCell(ctx context.Context, cell workload.Cell, cg *cpucap.Group) (results.Result, error) {
	if r.feed == nil {
		return r.runOne(ctx, cell, cg)
	}
	var res results.Result
	err := r.feed.Inherit(func() error {
		var err error
		res, err = r.runOne(ctx, cell, cg)
		return err
	})
	return res, err
}

// PrintTable writes rows as a table, each cell's wall time also as a ratio
// to spin with no contention.
func PrintTable(w io.Writer, rows []Row) error {
	base := 0.0
	for _, r := range rows {
		if r.Contention == "none" && r.Mode == "spin" && base == 0 {
			base = r.WallS
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "contention\tmode\tthreshold\twall s\tvs spin alone\tcpu s\trecv p50 µs\trecv p99 µs\tlaunch p50 µs\tlaunch p99 µs\tco-runner cpu\t")
	for _, r := range rows {
		ratio, co := "-", "-"
		if base > 0 {
			ratio = fmt.Sprintf("%.2f", r.WallS/base)
		}
		if r.CorunnerShare > 0 {
			co = fmt.Sprintf("%.0f%%", 100*r.CorunnerShare)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.3f\t%s\t%.3f\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t\n", r.Contention, r.Mode, r.Threshold, r.WallS, ratio, r.CPUS,
			r.ReceiveP50US, r.ReceiveP99US, r.LaunchP50US, r.LaunchP99US, co)
	}
	return tw.Flush()
}
