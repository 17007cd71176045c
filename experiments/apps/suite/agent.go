package suite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/vgpu-probe/vgpu-probe/agent/hintfeed"
	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
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
	// MitigatedArms, when set, are the only arms that keep the slice
	// (apps --mitigate-arms): programs that compare the arms in one
	// process give their threads the kernel's default slice for the
	// others (APPS_INPROC_UNMITIGATED, experiments/apps/loop.h), so that
	// CUDA without the agent and the library with it meet in one process.
	MitigatedArms []string
}

// EnvUnmitigated names the arms an in-process program runs without the
// agent's slice (experiments/apps/loop.h and inproc.py read it).
const EnvUnmitigated = "APPS_INPROC_UNMITIGATED"

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
	if a.MitigatedArms != nil {
		w = append(w, "arms="+strings.Join(a.MitigatedArms, ","))
	}
	return strings.Join(w, " ")
}

// check says why a's MitigatedArms cannot be done for these programs.
func (a *Agent) check(programs []Program) error {
	if a == nil || a.MitigatedArms == nil {
		return nil
	}
	if a.Mitigation == nil {
		return errors.New("--mitigate-arms: which arms keep the slice of --mitigate: add --mitigate slice=DURATION")
	}
	if len(a.MitigatedArms) == 0 {
		return errors.New("--mitigate-arms: name the arms that keep the slice")
	}
	if err := uniqueIn("--mitigate-arms", "arm", a.MitigatedArms, AllArms); err != nil {
		return err
	}
	for _, p := range programs {
		if !p.InProcess {
			return fmt.Errorf("--mitigate-arms: program %s runs each arm in a process of its own, which has the slice from its start: only programs that compare the arms in one process (\"in_process\": true) can take it away per arm", p.Name)
		}
	}
	return nil
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

// agentEnv is what the agent adds to p's environment: the page to read,
// and the arms without the slice.
func (c *Config) agentEnv(p Program) []string {
	var env []string
	if c.feed.Hints() {
		env = append(env, signal.EnvHints+"="+c.feed.Path(pageName(p)))
	}
	if c.Agent != nil && c.Agent.MitigatedArms != nil {
		without := slices.DeleteFunc(slices.Clone(Arms), func(a string) bool { return slices.Contains(c.Agent.MitigatedArms, a) })
		env = append(env, EnvUnmitigated+"="+strings.Join(without, ","))
	}
	return env
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
		// A cap on N CPUs allows N quotas per period (corunner.SetupOn).
		quota, period = int64(settingOf(contention).CPUs)*c.CapQuota.Microseconds(), c.CapPeriod.Microseconds()
	}
	if err := c.feed.WatchProcess(pageName(p), pid, quota, period); err != nil {
		return nil, fmt.Errorf("--with-agent: watching %s: %w", p.Name, err)
	}
	return func() { c.feed.Unwatch(pageName(p)) }, nil
}
