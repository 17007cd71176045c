package workload

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sort"
	"syscall"

	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/experiments/cpucap"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/simdev"
	"github.com/vgpu-probe/vgpu-probe/internal/reexec"
	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/results/stats"
)

// Cell is one measurement: the loop with one wait mode on one device, run
// in a process of its own so that it can be pinned, capped and timed alone.
type Cell struct {
	Config Config          `json:"config"`
	Mode   hybridsync.Mode `json:"mode"`
	Device string          `json:"device"` // a name registered with RegisterDevice
	CPU    int             `json:"cpu"`    // pin the loop's thread here; -1: don't
	// Threshold is where the Syncer takes the remaining slice from
	// (Threshold*); "" leaves it to the HYBRIDSYNC_* environment.
	Threshold string `json:"threshold,omitempty"`
	// HintPage is the page for ThresholdHints.
	HintPage string `json:"hint_page,omitempty"`
}

// Opener opens a device and the waiter for a mode; close releases both.
type Opener func(mode hybridsync.Mode) (dev Device, wait Waiter, close func(), err error)

var devices = map[string]Opener{"sim": openSim}

// RegisterDevice adds a device for cells (call from init).
func RegisterDevice(name string, open Opener) { devices[name] = open }

// Devices lists the registered device names.
func Devices() []string {
	var names []string
	for n := range devices {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// openSim is the simulated GPU with the Go primitive.
func openSim(mode hybridsync.Mode) (Device, Waiter, func(), error) {
	cfg, err := simConfig(mode)
	if err != nil {
		return nil, nil, nil, err
	}
	s := hybridsync.New(cfg)
	return SimDevice{Dev: simdev.New(1)}, s.Sync, func() {}, nil
}

const envCell = "VGPU_PROBE_CELL"

func init() { reexec.Register("workload-cell", cellMain) }

// RunCell runs c in a child process, in cg when not nil, and returns its
// result with the CPU time the whole process used. The child starts its
// loop only once it is in the cgroup. Cancelling ctx kills it.
func RunCell(ctx context.Context, c Cell, cg *cpucap.Group) (results.Result, error) {
	return RunCellStarted(ctx, c, cg, nil)
}

// RunCellStarted is RunCell calling started, when not nil, with the
// child's pid before the loop begins (the loop runs on the child's main
// thread, whose tid is the pid): a hint publisher watches it from its
// first step.
func RunCellStarted(ctx context.Context, c Cell, cg *cpucap.Group, started func(pid int) error) (results.Result, error) {
	if _, ok := devices[c.Device]; !ok {
		return results.Result{}, fmt.Errorf("unknown device %q (want one of %v)", c.Device, Devices())
	}
	env, err := thresholdEnv(c)
	if err != nil {
		return results.Result{}, err
	}
	spec, err := json.Marshal(c)
	if err != nil {
		return results.Result{}, err
	}
	cmd, err := reexec.Command("workload-cell")
	if err != nil {
		return results.Result{}, err
	}
	cmd.Env = append(append(cmd.Env, env...), envCell+"="+string(spec))
	var out bytes.Buffer
	cmd.Stdout = &out
	start, err := cmd.StdinPipe()
	if err != nil {
		return results.Result{}, err
	}
	if err := cmd.Start(); err != nil {
		return results.Result{}, fmt.Errorf("start workload: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	defer stop()
	if err := place(cmd.Process.Pid, cg, started); err != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		return results.Result{}, err
	}
	start.Close() // the child's signal to begin
	if err := cmd.Wait(); err != nil {
		if ctx.Err() != nil {
			return results.Result{}, ctx.Err()
		}
		return results.Result{}, fmt.Errorf("workload %s on %s: %w", c.Mode, c.Device, err)
	}
	var r results.Result
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return results.Result{}, fmt.Errorf("workload output: %w", err)
	}
	u := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	r.CPUS = float64(syscall.TimevalToNsec(u.Utime)+syscall.TimevalToNsec(u.Stime)) / 1e9
	return r, nil
}

// place puts the child in cg and tells started about it.
func place(pid int, cg *cpucap.Group, started func(int) error) error {
	if cg != nil {
		if err := cg.Add(pid); err != nil {
			return err
		}
	}
	if started != nil {
		return started(pid)
	}
	return nil
}

// cellMain runs in the child.
func cellMain() int {
	var c Cell
	if err := json.Unmarshal([]byte(os.Getenv(envCell)), &c); err != nil {
		fmt.Fprintln(os.Stderr, "workload cell:", err)
		return 2
	}
	runtime.LockOSThread()
	if c.CPU >= 0 {
		if err := corunner.Pin(c.CPU); err != nil {
			fmt.Fprintln(os.Stderr, "workload cell:", err)
			return 1
		}
	}
	dev, wait, closeDev, err := devices[c.Device](c.Mode)
	if err != nil {
		fmt.Fprintln(os.Stderr, "workload cell:", err)
		return 1
	}
	defer closeDev()
	io.Copy(io.Discard, os.Stdin) // wait until the parent has placed us
	r, err := Run(c.Config, dev, wait)
	if err != nil {
		fmt.Fprintln(os.Stderr, "workload cell:", err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		return 1
	}
	return 0
}

// Median returns the result whose every field is the median of rs over
// that field (timelines are taken from the median-wall run).
func Median(rs []results.Result) results.Result {
	if len(rs) == 0 {
		return results.Result{}
	}
	med := func(f func(results.Result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		return stats.Median(v)
	}
	byWall := slices.Clone(rs)
	slices.SortFunc(byWall, func(a, b results.Result) int { return cmp.Compare(a.WallS, b.WallS) })
	return results.Result{
		WallS:        med(func(r results.Result) float64 { return r.WallS }),
		CPUS:         med(func(r results.Result) float64 { return r.CPUS }),
		Steps:        rs[0].Steps,
		ReceiveP50US: med(func(r results.Result) float64 { return r.ReceiveP50US }),
		ReceiveP99US: med(func(r results.Result) float64 { return r.ReceiveP99US }),
		LaunchP50US:  med(func(r results.Result) float64 { return r.LaunchP50US }),
		LaunchP99US:  med(func(r results.Result) float64 { return r.LaunchP99US }),
		Timeline:     byWall[len(byWall)/2].Timeline,
	}
}
