package agent

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/vgpu-probe/vgpu-probe/agent/exporter"
	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
)

func addMitigateFlag(f *pflag.FlagSet, o *Options) {
	f.StringVar(&o.Mitigate, "mitigate", "", "give the watched threads a short EEVDF slice while the agent runs, so they preempt co-runners as soon as they wake: "+mitigate.Usage+" (off by default; needs Linux 6.12+)")
}

// validateMitigate checks the --mitigate syntax alone.
func (o *Options) validateMitigate() error {
	if o.Mitigate == "" {
		return nil
	}
	if _, err := mitigate.Parse(o.Mitigate); err != nil {
		return usage.Errorf("%v", err)
	}
	return nil
}

// mitigateSources, with --mitigate, refuses a kernel without custom
// slices and wraps the sources so that every thread they report gets the
// slice; slice tells which slice a thread got (for the hint pages), nil
// without --mitigate; stop puts the old slices back. Call stop after the
// monitor has stopped consuming the sources.
func (o *Options) mitigateSources(sources []targets.Source) (_ []targets.Source, slice func(tid int) time.Duration, stop func(), _ error) {
	if o.Mitigate == "" {
		return sources, nil, func() {}, nil
	}
	cfg, err := mitigate.Parse(o.Mitigate)
	if err != nil {
		return nil, nil, nil, usage.Errorf("%v", err)
	}
	m, err := mitigate.New(mitigate.Options{Slice: cfg.Slice, Log: o.Log, Sched: o.Sched,
		Failed: exporter.Errors.Counter(exporter.ErrorMitigate)})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--mitigate: %w", err)
	}
	out := make([]targets.Source, len(sources))
	for i, s := range sources {
		out[i] = m.Source(s)
	}
	stop = func() {
		if err := m.Stop(); err != nil {
			o.Log.Error().Err(err).Msg("mitigation: restoring slices")
		}
	}
	return out, m.Slice, stop, nil
}
