package bench

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"

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
	hints := slices.Contains(o.Thresholds, workload.ThresholdHints)
	if o.HintsPage != "" && !hints {
		return fmt.Errorf("--hints-page is for --threshold hints")
	}
	if hints && o.HintsPage == "" && os.Geteuid() != 0 {
		return fmt.Errorf("--threshold hints publishes the hint page with the agent's eBPF programs, which needs root (or give --hints-page)")
	}
	return nil
}
