package suite

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/experiments/hintfeed"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
)

// Agent is apps --with-agent: the agent run in-process beside the suite,
// watching each program's process while it runs (never the co-runner's).
type Agent struct {
	// Hints publishes the program's hint page and points the program's
	// HYBRIDSYNC_HINTS at it (every arm; only libhybridsync reads it).
	Hints bool
	// Mitigation gives the program's threads a short EEVDF slice from
	// their start, in every arm; with Hints the page carries it.
	Mitigation *mitigate.Config
}

// String names the setting as runs.jsonl and the summary record it, e.g.
// "hints mitigate=slice=100µs"; "" for no agent.
func (a *Agent) String() string {
	if a == nil {
		return ""
	}
	var w []string
	if a.Hints {
		w = append(w, "hints")
	}
	if a.Mitigation != nil {
		w = append(w, "mitigate=slice="+a.Mitigation.Slice.String())
	}
	return strings.Join(w, " ")
}

// startAgent starts the agent in-process where c asks for it; Run closes
// it.
func (c *Config) startAgent(ctx context.Context) error {
	if c.Agent == nil {
		return nil
	}
	f, err := hintfeed.Start(ctx, hintfeed.Options{Kind: targets.KindPID, Hints: c.Agent.Hints, Mitigation: c.Agent.Mitigation})
	if err != nil {
		return fmt.Errorf("--with-agent: %w", err)
	}
	c.feed = f
	return nil
}

// pageName is the target name of program p's page: one program runs at a
// time, and its page path is known before it starts.
func pageName(p Program) string { return "apps-" + p.Name }

// agentEnv is what the agent adds to p's environment: the page to read.
func (c *Config) agentEnv(p Program) []string {
	if !c.feed.Hints() {
		return nil
	}
	return []string{hybridsync.EnvHints + "=" + c.feed.Path(pageName(p))}
}

// underAgent runs run (which starts and waits for p's process) from a
// thread with the slice where the agent mitigates: the process dies with
// the thread that started it (Pdeathsig), so the whole run is inside.
func (c *Config) underAgent(run func() error) error {
	if c.feed == nil {
		return run()
	}
	return c.feed.Inherit(run)
}

// watch has the agent watch p's process pid under contention until the
// returned stop; nothing without an agent.
func (c *Config) watch(p Program, pid int, contention string) (stop func(), err error) {
	if c.feed == nil {
		return func() {}, nil
	}
	var quota, period int64
	if corunner.Capped(contention) {
		quota, period = c.CapQuota.Microseconds(), c.CapPeriod.Microseconds()
	}
	if err := c.feed.WatchProcess(pageName(p), pid, quota, period); err != nil {
		return nil, fmt.Errorf("--with-agent: watching %s: %w", p.Name, err)
	}
	return func() { c.feed.Unwatch(pageName(p)) }, nil
}

// AgentSettings are the agent settings (Run.Agent) of runs, each once, in
// the order first seen: tables of runs made under different settings are
// not comparable.
func AgentSettings(runs []Run) []string {
	var out []string
	for _, r := range runs {
		if !slices.Contains(out, r.Agent) {
			out = append(out, r.Agent)
		}
	}
	return out
}
