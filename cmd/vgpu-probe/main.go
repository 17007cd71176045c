// Command vgpu-probe measures and mitigates CPU-GPU synchronization
// interference in GPU virtual machines that share CPUs with other tenants.
//
// main stays thin: it builds the root command from the subcommand packages,
// sets up logging and maps errors to exit codes (2: bad input, 1: failure,
// 128+n: ended by signal n, as shells report it: 130 for Ctrl-C, 143 for
// SIGTERM).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/advise"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/agent"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/apps"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/bench"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/complete"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/guest"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/man"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/report"
	runcmd "github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/run"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/vmjob"
	"github.com/vgpu-probe/vgpu-probe/internal/reexec"
)

// version and commit are set at build time by the Makefile (-ldflags
// "-X main.version=... -X main.commit=..."): the VERSION file and the
// commit built. A plain `go build` leaves them empty; the commit is then
// the one Go stamped into the binary, if any.
var version, commit = "dev", ""

// versionString is what --version prints after "vgpu-probe version ".
func versionString(info *debug.BuildInfo, ok bool) string {
	c := commit
	if c == "" && ok {
		var modified bool
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				c = s.Value[:min(12, len(s.Value))]
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if c != "" && modified {
			c += "-dirty"
		}
	}
	if c == "" {
		c = "unknown"
	}
	return version + " (commit " + c + ")"
}

// logLevels are the --log-level values the help names, as zerolog spells them.
var logLevels = []string{zerolog.DebugLevel.String(), zerolog.InfoLevel.String(), zerolog.WarnLevel.String(), zerolog.ErrorLevel.String()}

func newRootCmd() *cobra.Command {
	var logLevel string
	root := &cobra.Command{
		Use:   "vgpu-probe",
		Short: "Measure and fix CPU-GPU sync interference in GPU VMs that share CPUs",
		Long: `vgpu-probe finds and fixes the slowdown a GPU program suffers when its
host thread shares CPUs with other tenants: late kernel launches and late
notice of kernel completion.

  advise   which way to run your GPU program here, measured: as it is, CUDA blocking-sync, libhybridsync
  agent    host agent: vCPU discontinuity per VM with eBPF, for Prometheus
  apps     unmodified GPU programs: CUDA default, CUDA blocking-sync, libhybridsync, under contention
  bench    NAMD-like sync benchmark, every wait mode, under CPU contention
  guest    inside a VM: expose the host's hint page to local processes
  report   interference report: results or live agents; table, JSON, HTML, Perfetto
  run      the paper's experiments: shared1/shared2/baseline x vCPUs x co-runners x modes`,
		Version:       versionString(debug.ReadBuildInfo()),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			lvl, err := zerolog.ParseLevel(logLevel)
			if err != nil {
				return usage.Errorf("--log-level %q: want debug, info, warn or error", logLevel)
			}
			zerolog.SetGlobalLevel(lvl)
			return nil
		},
	}
	root.PersistentFlags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error (logs go to stderr)")
	complete.Flags(root, map[string]cobra.CompletionFunc{"log-level": complete.One(logLevels...)})
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usage.Wrap(err) })
	root.AddCommand(
		advise.NewCmd(nil),
		agent.NewCmd(nil),
		apps.NewCmd(nil),
		bench.NewCmd(nil),
		guest.NewCmd(nil),
		report.NewCmd(nil),
		runcmd.NewCmd(nil),
		vmjob.NewCmd(),
		man.NewCmd(),
	)
	return root
}

func main() {
	// Co-runners and benchmark cells are this same binary in a child
	// process; reexec.Init runs them and never returns there.
	reexec.Init()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line args and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	zerolog.TimeFieldFormat = zerolog.TimeFormatUnixMs
	ctx, stop := notifyContext()
	defer stop()
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	var sig interrupted
	switch {
	case err != nil && errors.Is(err, context.Canceled) && errors.As(context.Cause(ctx), &sig):
		fmt.Fprintf(stderr, "vgpu-probe: stopped: %v\n", sig)
	case err != nil:
		fmt.Fprintf(stderr, "vgpu-probe: %v\n", err)
	}
	return exitCode(err, context.Cause(ctx))
}

// exitCode maps a command's error to the exit status; cause is why the
// command's context ended, if it did.
func exitCode(err, cause error) int {
	var sig interrupted
	switch {
	case err == nil:
		return 0
	case errors.Is(err, usage.ErrBadInput) || isCobraUsage(err):
		return 2
	case errors.As(cause, &sig):
		return 128 + int(sig.sig)
	}
	return 1
}

// interrupted is the cause of the context's end when SIGINT or SIGTERM
// arrives; it remembers which, for the exit status.
type interrupted struct{ sig syscall.Signal }

func (i interrupted) Error() string { return i.sig.String() + " signal received" }

// Is makes the cause a context.Canceled, as signal.NotifyContext's is.
func (interrupted) Is(target error) bool { return target == context.Canceled }

// notifyContext is signal.NotifyContext that keeps the signal in the
// context's cause: the commands stop what they started and say what they
// finished, and main exits with the status a shell expects.
func notifyContext() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case s := <-ch:
			cancel(interrupted{s.(syscall.Signal)})
		case <-ctx.Done():
		}
	}()
	return ctx, func() { signal.Stop(ch); cancel(nil) }
}

// isCobraUsage reports errors cobra raises itself before any RunE runs
// (unknown command, wrong argument count).
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "accepts ", "requires ", "unknown flag", "invalid argument"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}
