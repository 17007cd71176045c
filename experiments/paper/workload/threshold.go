package workload

import (
	"fmt"
	"os"
	"strings"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
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
		return []string{signal.EnvHints + "=", hybridsync.EnvMaxSpin + "="}, nil
	case ThresholdStatic:
		return []string{signal.EnvHints + "=", static}, nil
	case ThresholdHints:
		if c.HintPage == "" {
			return nil, fmt.Errorf("threshold hints needs a hint page")
		}
		return []string{signal.EnvHints + "=" + c.HintPage, hybridsync.EnvMaxSpin + "="}, nil
	}
	return nil, fmt.Errorf("unknown threshold %q (want one of %v)", c.Threshold, Thresholds)
}

// simConfig is the simulated device's Syncer configuration: the mode
// asked for, the threshold and contention sources from the environment
// (thresholdEnv).
func simConfig(mode hybridsync.Mode) (hybridsync.Config, error) {
	return SimConfigFor(mode, "", "")
}

// SimConfigFor is the Syncer configuration a cell child with threshold
// source threshold (and page, for ThresholdHints) would build from its
// environment, built here without changing this process's environment:
// the libvirt backend's guest runs its loops in-process. An empty
// threshold leaves it to the environment.
func SimConfigFor(mode hybridsync.Mode, threshold, page string) (hybridsync.Config, error) {
	env, err := thresholdEnv(Cell{Threshold: threshold, HintPage: page})
	if err != nil {
		return hybridsync.Config{}, err
	}
	ec, err := hybridsync.ConfigFromEnv(overlay(env, os.Getenv))
	if err != nil {
		return hybridsync.Config{}, err
	}
	return hybridsync.Config{Mode: mode, MaxSpin: ec.MaxSpin, Threshold: ec.Threshold, Contention: ec.Contention}, nil
}

// overlay looks KEY=VALUE settings up before getenv, as a child's
// environment built by appending them would (the last setting wins).
func overlay(env []string, getenv func(string) string) func(string) string {
	return func(key string) string {
		for i := len(env) - 1; i >= 0; i-- {
			if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
				return v
			}
		}
		return getenv(key)
	}
}
