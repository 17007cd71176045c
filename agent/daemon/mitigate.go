package daemon

import (
	"fmt"
	"time"

	"github.com/vgpu-probe/vgpu-probe/agent/exporter"
	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
)

// mitigateSources, with --mitigate, refuses a kernel without custom
// slices and wraps the sources so that every thread they report gets the
// slice; slice tells which slice a thread got (for the hint pages), nil
// without --mitigate; stop puts the old slices back. Call stop after the
// monitor has stopped consuming the sources.
func (c *Config) mitigateSources(sources []targets.Source) (_ []targets.Source, slice func(tid int) time.Duration, stop func(), _ error) {
	if c.Mitigate == "" {
		return sources, nil, func() {}, nil
	}
	cfg, err := mitigate.Parse(c.Mitigate)
	if err != nil {
		return nil, nil, nil, requestErrorf("%v", err)
	}
	m, err := mitigate.New(mitigate.Options{Slice: cfg.Slice, Log: c.Log, Sched: c.Sched,
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
			c.Log.Error().Err(err).Msg("mitigation: restoring slices")
		}
	}
	return out, m.Slice, stop, nil
}
