package mitigate

import (
	"context"

	"github.com/vgpu-probe/vgpu-probe/agent/targets"
)

// Source returns src with every event applied to m before it is passed
// on, so that threads the source re-discovers get the slice as soon as
// the monitor sees them, and threads that go get theirs back.
func (m *Mitigator) Source(src targets.Source) targets.Source {
	return &source{src: src, m: m}
}

type source struct {
	src targets.Source
	m   *Mitigator
}

func (s *source) Run(ctx context.Context) <-chan targets.Event {
	in := s.src.Run(ctx)
	out := make(chan targets.Event, 1)
	go func() {
		defer close(out)
		for ev := range in {
			s.m.Apply(ev)
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
