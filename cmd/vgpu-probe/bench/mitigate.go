package bench

import (
	"context"
	"fmt"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"

	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/experiments/cgroup"
	"github.com/vgpu-probe/vgpu-probe/experiments/workload"
)

func addMitigateFlag(f *pflag.FlagSet, o *Options) {
	f.StringVar(&o.Mitigate, "mitigate", "", "give each benchmark cell's threads (not the co-runner's) a short EEVDF slice, as `vgpu-probe agent --mitigate` does: "+mitigate.Usage+" (needs Linux 6.12+)")
}

// parseMitigate parses --mitigate with the agent's parser.
func (o *Options) parseMitigate() error {
	if o.Mitigate == "" {
		return nil
	}
	cfg, err := mitigate.Parse(o.Mitigate)
	if err != nil {
		return err
	}
	o.mitigation = &cfg
	return nil
}

// startMitigation refuses a kernel without custom slices before any cell
// runs.
func (o *Options) startMitigation() error {
	if o.mitigation == nil {
		return nil
	}
	m, err := mitigate.New(mitigate.Options{Slice: o.mitigation.Slice, Log: zerolog.Nop()})
	if err != nil {
		return fmt.Errorf("--mitigate: %w", err)
	}
	o.mitigator = m
	return nil
}

// runCell runs one cell; with --mitigate its process is started from a
// thread with the slice, so that the cell and every thread it makes
// (CUDA's included) have it from the start, and only for the cell's life.
func (o *Options) runCell(ctx context.Context, cell workload.Cell, cg *cgroup.Group) (workload.Result, error) {
	if o.mitigator == nil {
		return o.runOne(ctx, cell, cg)
	}
	var r workload.Result
	err := o.mitigator.Inherit(func() error {
		var err error
		r, err = o.runOne(ctx, cell, cg)
		return err
	})
	return r, err
}
