package workload

import (
	"fmt"
	"os"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
)

// Threshold sources a cell's Syncer can take its remaining slice from.
const (
	// ThresholdGuest: the guest-only estimate (the Syncer's default).
	ThresholdGuest = "guest"
	// ThresholdStatic: the paper's fixed max_threshold, 10 ms.
	ThresholdStatic = "static"
	// ThresholdHints: the host agent's hint page (Cell.HintPage).
	ThresholdHints = "hints"
)

// Thresholds lists the threshold sources cells accept.
var Thresholds = []string{ThresholdHints, ThresholdGuest, ThresholdStatic}

// thresholdEnv is what a cell's environment must say for its threshold:
// cells configure their Syncer the way the library does (ConfigFromEnv),
// so one setting serves the simulated and the real device. An empty
// value unsets a variable the user's environment may carry.
func thresholdEnv(c Cell) ([]string, error) {
	static := fmt.Sprintf("%s=%d", hybridsync.EnvMaxSpin, hybridsync.DefaultMaxSpin/1000)
	switch c.Threshold {
	case "":
		return nil, nil // as the environment says
	case ThresholdGuest:
		return []string{hybridsync.EnvHints + "=", hybridsync.EnvMaxSpin + "="}, nil
	case ThresholdStatic:
		return []string{hybridsync.EnvHints + "=", static}, nil
	case ThresholdHints:
		if c.HintPage == "" {
			return nil, fmt.Errorf("threshold hints needs a hint page")
		}
		return []string{hybridsync.EnvHints + "=" + c.HintPage, hybridsync.EnvMaxSpin + "="}, nil
	}
	return nil, fmt.Errorf("unknown threshold %q (want one of %v)", c.Threshold, Thresholds)
}

// simConfig is the simulated device's Syncer configuration: the mode
// asked for, the threshold and contention sources from the environment
// (thresholdEnv).
func simConfig(mode hybridsync.Mode) (hybridsync.Config, error) {
	ec, err := hybridsync.ConfigFromEnv(os.Getenv)
	if err != nil {
		return hybridsync.Config{}, err
	}
	return hybridsync.Config{Mode: mode, MaxSpin: ec.MaxSpin, Threshold: ec.Threshold, Contention: ec.Contention}, nil
}
