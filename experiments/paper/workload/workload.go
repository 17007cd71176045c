// Package workload is the NAMD-like synchronization-intensive benchmark:
// per step, a fixed amount of real CPU work, one kernel launch, one wait.
// Hundreds of short kernels per second, each waited for before the next
// step's host work can start, make it as sensitive to late launches and
// late completion notice as NAMD is.
package workload

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/clock"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/simdev"
	"github.com/vgpu-probe/vgpu-probe/results"
)

// Device launches kernels of a given duration and returns the event
// recorded after each.
type Device interface {
	Launch(k simdev.Kernel, d time.Duration) (hybridsync.Event, error)
}

// Waiter waits for an event; it is a Syncer's Sync, or a C library's.
type Waiter func(ev hybridsync.Event, k hybridsync.KernelID) error

// Config is one run of the loop.
type Config struct {
	Steps    int            `json:"steps"`
	Work     int64          `json:"work"` // host work per step, in units of Spin (see Calibrate)
	Profile  simdev.Profile `json:"profile"`
	Seed     uint64         `json:"seed"`
	Timeline bool           `json:"timeline"` // keep per-step timestamps
}

// Run runs the loop on the calling thread (callers pin it first).
func Run(cfg Config, dev Device, wait Waiter) (results.Result, error) {
	if cfg.Steps <= 0 || cfg.Work < 0 || len(cfg.Profile.Kernels) == 0 {
		return results.Result{}, errors.New("workload: want steps > 0, work >= 0 and at least one kernel")
	}
	var names hybridsync.Names
	ids := make([]hybridsync.KernelID, len(cfg.Profile.Kernels))
	for i, k := range cfg.Profile.Kernels {
		ids[i] = names.ID(k.Name)
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	receive := make([]int64, 0, cfg.Steps)
	launch := make([]int64, 0, cfg.Steps)
	var tl []results.Step
	start := clock.Now()
	for i := range cfg.Steps {
		hostStart := clock.Now()
		Spin(cfg.Work)
		hostEnd := clock.Now()
		k, d := cfg.Profile.At(i, rng)
		ev, err := dev.Launch(k, d)
		if err != nil {
			return results.Result{}, fmt.Errorf("step %d: launch %s: %w", i, k.Name, err)
		}
		launched := ev.LaunchedAt()
		if err := wait(ev, ids[i%len(ids)]); err != nil {
			return results.Result{}, fmt.Errorf("step %d: wait for %s: %w", i, k.Name, err)
		}
		noticed := clock.Now()
		launch = append(launch, launched-hostEnd)
		complete := int64(-1)
		if ct, ok := ev.(hybridsync.CompletionTimer); ok {
			if t, ok := ct.CompletedAt(); ok {
				receive = append(receive, noticed-t)
				complete = t - start
			}
		}
		if cfg.Timeline {
			tl = append(tl, results.Step{HostStart: hostStart - start, HostEnd: hostEnd - start, Launch: launched - start,
				Complete: complete, Noticed: noticed - start, Kernel: k.Name})
		}
	}
	r := results.Result{WallS: float64(clock.Now()-start) / 1e9, Steps: cfg.Steps, Timeline: tl}
	r.ReceiveP50US, r.ReceiveP99US = percentileUS(receive, 0.50), percentileUS(receive, 0.99)
	r.LaunchP50US, r.LaunchP99US = percentileUS(launch, 0.50), percentileUS(launch, 0.99)
	return r, nil
}

// percentileUS returns the q-quantile of ns values in µs (nearest rank).
func percentileUS(ns []int64, q float64) float64 {
	if len(ns) == 0 {
		return 0
	}
	s := slices.Clone(ns)
	slices.Sort(s)
	return float64(s[min(int(q*float64(len(s))), len(s)-1)]) / 1e3
}

// SimDevice adapts simdev to Device: one stream, as NAMD's main loop uses.
type SimDevice struct{ Dev *simdev.Device }

// Launch launches on stream 0.
func (s SimDevice) Launch(_ simdev.Kernel, d time.Duration) (hybridsync.Event, error) {
	return s.Dev.Launch(0, d), nil
}
