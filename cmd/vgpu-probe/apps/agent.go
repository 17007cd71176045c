package apps

import (
	"errors"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/experiments/apps/suite"
)

// agentFlags are --with-agent and what it does.
type agentFlags struct {
	WithAgent     bool
	Hints         bool
	Mitigate      string
	MitigatedArms []string
}

func (a *agentFlags) add(f *pflag.FlagSet) {
	f.BoolVar(&a.WithAgent, "with-agent", false, "run the agent in-process (root), watching each program's process while it runs, to do what --hints and --mitigate say")
	f.BoolVar(&a.Hints, "hints", false, "with --with-agent: publish each program's hint page and point its HYBRIDSYNC_HINTS at it")
	f.StringVar(&a.Mitigate, "mitigate", "", "with --with-agent: give each program's threads (not the co-runner's) a short EEVDF slice from their start: "+mitigate.Usage+" (needs Linux 6.12+)")
	f.StringSliceVar(&a.MitigatedArms, "mitigate-arms", nil, "with --mitigate: the only arms that keep the slice ("+strings.Join(suite.AllArms, ", ")+"); programs that compare the arms in one process switch their threads to the kernel's default slice for the others, so that CUDA without the agent and the library with it meet in one process (default: every arm keeps it)")
}

// agent checks the flags and returns the suite's agent setting; nil
// without --with-agent.
func (a *agentFlags) agent() (*suite.Agent, error) {
	if !a.WithAgent {
		if a.Hints || a.Mitigate != "" || a.MitigatedArms != nil {
			return nil, errors.New("--hints, --mitigate and --mitigate-arms are what --with-agent does: add --with-agent")
		}
		return nil, nil
	}
	if !a.Hints && a.Mitigate == "" {
		return nil, errors.New("--with-agent needs --hints, --mitigate slice=..., or both: what the agent does for the programs")
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("--with-agent runs the agent's eBPF programs and sets the programs' slices, which needs root")
	}
	ag := &suite.Agent{Hints: a.Hints}
	if a.Mitigate != "" {
		cfg, err := mitigate.Parse(a.Mitigate)
		if err != nil {
			return nil, err
		}
		ag.Mitigation = &cfg
	}
	ag.MitigatedArms = a.MitigatedArms
	return ag, nil
}
