package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/exporter"
	"github.com/vgpu-probe/vgpu-probe/agent/hints"
	"github.com/vgpu-probe/vgpu-probe/agent/monitor"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
)

// addHints adds --hints and the hints-xml subcommand.
func addHints(cmd *cobra.Command, o *Options) {
	cmd.Flags().StringVar(&o.Hints, "hints", "", "publish a remaining-time-slice hint page per target in this directory (e.g. /dev/shm; keeps the eBPF programs attached)")
	cmd.AddCommand(&cobra.Command{
		Use:   "hints-xml DOMAIN",
		Short: "Print the libvirt <shmem> element that maps DOMAIN's hint page into the guest",
		Long: `hints-xml prints the <shmem> device to add to a domain's <devices> so that
the hint page the agent publishes for it (with --hints /dev/shm) appears in
the guest as an ivshmem-plain PCI device; run 'vgpu-probe guest' there.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), hintpage.ShmemXML(args[0]))
			return err
		},
	})
}

// hintSources checks the hints directory and routes target changes
// through a publisher, which publishes each thread's mitigation slice;
// nil without --hints.
func (o *Options) hintSources(srcs []targets.Source, mitigation func(tid int) time.Duration) ([]targets.Source, *hints.Publisher, error) {
	if o.Hints == "" {
		return srcs, nil, nil
	}
	pub, err := hints.New(hints.Options{Dir: o.Hints, Log: o.Log, Failed: exporter.Errors.Counter(exporter.ErrorHints),
		Mitigation: mitigation})
	if err != nil {
		return nil, nil, usage.Errorf("--hints %s: %v", o.Hints, err)
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
