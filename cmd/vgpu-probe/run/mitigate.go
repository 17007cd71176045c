package run

import (
	"context"
	"errors"
	"os"

	"github.com/spf13/pflag"

	"github.com/vgpu-probe/vgpu-probe/agent/hintfeed"
	"github.com/vgpu-probe/vgpu-probe/agent/hints"
	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
)

func addMitigateFlag(f *pflag.FlagSet, o *Options) {
	f.StringVar(&o.Mitigate, "mitigate", "", "give the runner's threads (not the co-runners') a short EEVDF slice, as the agent's --mitigate does: "+
		"on --backend local the runner process's, on --backend libvirt the runner VM's vCPU threads on the host (root); "+mitigate.Usage+" (needs Linux 6.12+)")
}

// checkMitigate parses --mitigate with the agent's parser.
func (o *Options) checkMitigate() error {
	if o.Mitigate == "" {
		return nil
	}
	cfg, err := mitigate.Parse(o.Mitigate)
	if err != nil {
		return err
	}
	if o.Backend == "libvirt" && os.Geteuid() != 0 {
		return errors.New("--mitigate with --backend libvirt sets the slice of QEMU's vCPU threads, which needs root")
	}
	o.mitigation = &cfg
	return nil
}

// startFeed starts the agent in-process where --hints or --mitigate ask
// for it (nil otherwise): on the libvirt backend it watches each runner
// domain; on the local backend each runner process starts with the slice.
func (o *Options) startFeed(ctx context.Context) (*hintfeed.Feed, error) {
	if !o.Hints && o.mitigation == nil {
		return nil, nil
	}
	fo := hintfeed.Options{Kind: targets.KindPID, Mitigation: o.mitigation}
	if o.Backend == "libvirt" {
		fo.Kind = targets.KindDomain
	}
	if o.Hints {
		fo.Hints, fo.Dir = true, hints.DefaultDir
	}
	return hintfeed.Start(ctx, fo)
}
