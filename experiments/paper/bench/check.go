package bench

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/workload"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/simdev"
	"github.com/vgpu-probe/vgpu-probe/results"
)

// ProfileMixed is the profile name of simdev.Mixed.
const ProfileMixed = "mixed"

// ParseProfile is the kernel profile name says: "" one kernel of the
// given duration and jitter (a fraction), ProfileMixed simdev.Mixed, any
// other name a file of lines NAME DURATION [JITTER%].
func ParseProfile(name string, kernel time.Duration, jitter float64) (simdev.Profile, error) {
	switch name {
	case "":
		return simdev.Fixed("kernel", kernel, jitter), nil
	case ProfileMixed:
		return simdev.Mixed, nil
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return simdev.Profile{}, fmt.Errorf("--profile: %w", err)
	}
	p, err := simdev.ParseProfile(string(b))
	if err != nil {
		return p, fmt.Errorf("--profile %s: %w", name, err)
	}
	return p, nil
}

// Check checks the matrix before anything runs, naming the flag at
// fault: positive steps and repetitions, known contention settings,
// device and threshold sources, a quota within its period, a CPU this
// process may use (CPU -1 becomes the last of them), and a hints page to
// read, or root to publish one, for the hints source.
func (o *Options) Check() error {
	if o.Steps <= 0 || o.Reps <= 0 {
		return fmt.Errorf("--steps and --reps must be positive")
	}
	for _, c := range o.Contentions {
		if !slices.Contains(corunner.Contentions, c) {
			return fmt.Errorf("--contention: unknown setting %q (want %s)", c, strings.Join(corunner.Contentions, ", "))
		}
	}
	if !slices.Contains(workload.Devices(), o.Device) {
		return fmt.Errorf("--device: unknown device %q (want %s)", o.Device, strings.Join(workload.Devices(), ", "))
	}
	if o.CapQuota <= 0 || o.CapQuota > o.CapPeriod {
		return fmt.Errorf("--cap-quota must be positive and at most --cap-period")
	}
	cpus, err := corunner.Online()
	if err != nil {
		return err
	}
	if o.CPU < 0 {
		o.CPU = cpus[len(cpus)-1]
	} else if !slices.Contains(cpus, o.CPU) {
		return fmt.Errorf("--cpu %d: not one this process may use (%v)", o.CPU, cpus)
	}
	for _, t := range o.Thresholds {
		if !slices.Contains(workload.Thresholds, t) {
			return fmt.Errorf("--threshold: unknown source %q (want %s)", t, strings.Join(workload.Thresholds, ", "))
		}
	}
	hints := slices.Contains(o.Thresholds, workload.ThresholdHints)
	if o.HintsPage != "" && !hints {
		return fmt.Errorf("--hints-page is for --threshold hints")
	}
	if hints && o.HintsPage == "" && os.Geteuid() != 0 {
		return fmt.Errorf("--threshold hints publishes the hint page with the agent's eBPF programs, which needs root (or give --hints-page)")
	}
	return nil
}

// Print writes rows as PrintTable's table, or with asJSON f, the results
// document (results.Encode), which carries them as its bench part.
func Print(w io.Writer, rows []Row, f *results.File, asJSON bool) error {
	if !asJSON {
		return PrintTable(w, rows)
	}
	return results.Encode(w, f)
}

// WriteResults writes f as DIR/results.json (dir "" is results.DefaultDir)
// and returns its path.
func WriteResults(dir string, f *results.File) (string, error) {
	dir, err := results.OutDir(dir, results.KindBench, f.Created)
	if err != nil {
		return "", err
	}
	return results.WriteDoc(dir, f)
}
