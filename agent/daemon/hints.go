package daemon

import (
	"context"
	"time"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/exporter"
	"github.com/vgpu-probe/vgpu-probe/agent/hints"
	"github.com/vgpu-probe/vgpu-probe/agent/monitor"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
)

// hintSources checks the hints directory and routes target changes
// through a publisher, which publishes each thread's mitigation slice;
// nil without --hints.
func (c *Config) hintSources(srcs []targets.Source, mitigation func(tid int) time.Duration) ([]targets.Source, *hints.Publisher, error) {
	if c.Hints == "" {
		return srcs, nil, nil
	}
	pub, err := hints.New(hints.Options{Dir: c.Hints, Log: c.Log, Failed: exporter.Errors.Counter(exporter.ErrorHints),
		Mitigation: mitigation})
	if err != nil {
		return nil, nil, requestErrorf("--hints %s: %v", c.Hints, err)
	}
	out := make([]targets.Source, len(srcs))
	for i, s := range srcs {
		out[i] = hints.Tee(s, pub)
	}
	return out, pub, nil
}

// startHints keeps the programs attached and feeds every switch event to
// the publisher; the returned function removes the pages.
func startHints(ctx context.Context, mo *monitor.Options, pub *hints.Publisher, probe *bpfload.Probe) func() {
	if pub == nil {
		return func() {}
	}
	mo.TraceEvery = 0 // every switch-in must be seen
	mo.OnEvent = pub.OnEvent
	pub.SetCounters(probe)
	go pub.Run(ctx)
	return pub.Close
}
