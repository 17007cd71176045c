// Package advise is `vgpu-probe advise -- CMD ARGS...`: which way to run
// a GPU program on this VM (as it is, CUDA's blocking-sync mode,
// libhybridsync, hybridsync-run), measured alone and beside a busy
// neighbour, in one line. The measurement is package advise's (over the
// apps suite), the decision results/decide's.
package advise

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/spf13/cobra"

	adv "github.com/vgpu-probe/vgpu-probe/advise"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/complete"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/experiments/apps/suite"
)

// NewCmd returns the advise command; runF replaces the run in tests.
func NewCmd(runF func(context.Context, *adv.Config) error) *cobra.Command {
	o := &adv.Config{}
	cmd := &cobra.Command{
		Use:   "advise [flags] -- CMD [ARGS...]",
		Short: "Which way to run a GPU program here: as it is, CUDA blocking-sync, libhybridsync or hybridsync-run",
		Long:  adv.Help,
		Example: `  make && ./vgpu-probe advise -- ./my_cuda_app --size 4096
  vgpu-probe advise --cpus 4 --max-time 20m -- python3 train.py --epochs 1
  vgpu-probe advise --lib /opt/hs/lib/libhybridsync.so --blocksync ./blocksync.so --max-reps 10 --table -- ./app`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usage.Errorf("no command: vgpu-probe advise [flags] -- CMD ARGS...")
			}
			o.Command, o.Stdout, o.Stderr = args, cmd.OutOrStdout(), cmd.ErrOrStderr()
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			parts, notes, err := suite.FindParts(o.Parts, exe)
			if err != nil {
				return usage.Wrap(err)
			}
			o.Parts = parts
			for _, n := range notes {
				cmd.PrintErrln("advise:", n)
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			_, err = adv.Run(cmd.Context(), o)
			if errors.As(err, new(adv.BadInput)) {
				return usage.Wrap(err)
			}
			return err
		},
	}
	f := cmd.Flags()
	// Flags after the command are the command's own.
	f.SetInterspersed(false)
	f.IntVar(&o.CPUs, "cpus", 0, "CPUs the program runs on, with a busy loop on each beside it (nonexN, while1xN); 0: the threads its first run kept busy, at most the CPUs it may use")
	f.IntVar(&o.CPU, "cpu", -1, "the highest of its CPUs (default: the last one this process may use)")
	f.StringSliceVar(&o.Patterns, "patterns", []string{"start", "1s"}, "the busy loops' patterns, each a setting: start (there from the start), 1s or 10s (on that long, off as long)")
	f.IntVar(&o.MinReps, "min-reps", 3, "repetitions before the advice may stop early")
	f.IntVar(&o.MaxReps, "max-reps", 30, "at most this many repetitions")
	o.MaxTime = 10 * time.Minute
	f.Var((*duration)(&o.MaxTime), "max-time", "the bound of the whole advise: no repetition starts that would end after it, one under way is stopped and left out (also the limit of one run)")
	f.StringVar(&o.Lib, "lib", "", "libhybridsync.so (default: build/lib beside the binary, or PREFIX/lib)")
	f.StringVar(&o.Blocksync, "blocksync", "", "the blocking-sync shim (default: build/"+suite.BlocksyncPath+" beside the binary, or PREFIX/"+suite.BlocksyncPath+")")
	f.StringVar(&o.Launcher, "launcher", "", "hybridsync-run (default: bin/ beside the library's folder; without one that way is left out)")
	f.StringVar(&o.Out, "out", "", "output directory (default vgpu-probe-results/advise-TIMESTAMP, UTC)")
	f.BoolVar(&o.Table, "table", false, "print apps' table of every way before the line")
	complete.Flags(cmd, map[string]cobra.CompletionFunc{
		"lib":       complete.Files("so"),
		"blocksync": complete.Files("so"),
		"launcher":  complete.AnyFile,
		"out":       complete.Dirs,
		"patterns":  complete.List(adv.Patterns...),
	})
	return cmd
}

// duration is a flag of a positive duration with its unit, whose error
// says so rather than quoting Go's parser.
type duration time.Duration

func (d *duration) String() string { return time.Duration(*d).String() }
func (d *duration) Type() string   { return "duration" }

func (d *duration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil || v <= 0 {
		return errors.New("want a positive duration with a unit, as 10m or 90s")
	}
	*d = duration(v)
	return nil
}
