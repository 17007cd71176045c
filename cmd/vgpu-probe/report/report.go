// Package report is `vgpu-probe report`: it reads experiment results,
// live agents, hybridsync stats and NVML samples, joins them
// (profiler/report) and renders a terminal table, JSON, a self-contained
// HTML page with plots, or a Perfetto trace.
package report

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/complete"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/experiments/apps/suite"
	"github.com/vgpu-probe/vgpu-probe/profiler/agentapi"
	"github.com/vgpu-probe/vgpu-probe/profiler/load"
	"github.com/vgpu-probe/vgpu-probe/profiler/promsource"
	"github.com/vgpu-probe/vgpu-probe/profiler/render/html"
	jsonr "github.com/vgpu-probe/vgpu-probe/profiler/render/json"
	"github.com/vgpu-probe/vgpu-probe/profiler/render/perfetto"
	"github.com/vgpu-probe/vgpu-probe/profiler/render/text"
	model "github.com/vgpu-probe/vgpu-probe/profiler/report"
	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/results/apptable"
)

// Renderers by --format.
var renderers = map[string]func(io.Writer, *model.Report) error{
	"text":     text.Render,
	"json":     jsonr.Render,
	"html":     html.Render,
	"perfetto": perfetto.Render,
}

// Formats lists the output formats.
func Formats() []string { return []string{"text", "json", "html", "perfetto"} }

// Options are report's flags and dependencies.
type Options struct {
	Results  []string
	Agents   []string
	Stats    []string
	NVML     []string
	Format   string
	Output   string
	Timeline int           // seconds of agent timeline to fetch (0: none)
	Timeout  time.Duration // per agent request or Prometheus query

	// Prometheus is a server that scrapes the agents; Range and Match
	// say over what span and which of its series.
	Prometheus, Range, Match string
	promRange                time.Duration
	promMatch                promsource.Selector

	Out, Err io.Writer
	// In is what an input named "-" reads.
	In io.Reader
	// HTTPClient reaches the agents; tests replace it.
	HTTPClient *http.Client
	// Now dates a report built only from inputs that carry no time.
	Now func() time.Time
}

// NewCmd returns the report command; runF replaces the run in tests.
func NewCmd(runF func(context.Context, *Options) error) *cobra.Command {
	o := &Options{}
	cmd := &cobra.Command{
		Use:   "report [RESULTS.json ...]",
		Short: "Report interference: experiment results or live agents, as table, JSON, HTML or Perfetto trace",
		Long: `report joins what vgpu-probe measured and says what it means.

For experimenters: report RESULTS.json (the results.json of vgpu-probe
run, bench, apps or advise, or apps' runs.jsonl, either gzip-compressed or not) gives the slowdown of each cell against one reference
per vCPU count (the fastest cell of the baseline, or for bench and apps of
the setting none, whatever its mode), GPU utilisation and its drop,
kernels per second, kernel launch and receive latency (the paper's
Table II), a verdict on whether the workload is vulnerable, and the best
mode of each setting with its margin over the next. Of apps' and
advise's runs (their results.json or runs.jsonl) it also computes apps'
table, the files of one agent setting taken together as apps --from
takes them: per arm the ratio to the fastest arm alone, and the paired
ratios by repetition with order-statistics intervals, the A/A control
(cuda-default-again over cuda-default) among them.

For operators: report --agent URL (repeat for several hosts) reads live
agents and ranks their VMs by interference, with a recommendation per VM
(dedicate vCPUs, enable CPU bandwidth control, use hybridsync, or nothing
to do) and the numbers behind it. For a fleet, report --prometheus URL
asks the Prometheus server that scrapes the agents instead: the same
ranking over --range (default 1h) from a dozen aggregated queries,
whatever the number of hosts; --match '{job="gpu"}' narrows the series.

Extra inputs: --stats FILE (HYBRIDSYNC_STATS files), --nvml FILE (NVML
samples). Each input is a regular file of at most 256 MiB, or - for
stdin (once); a named pipe, device or directory is refused unread.
Formats: text (default), json, html (one self-contained page with
plots), perfetto (a trace for ui.perfetto.dev). With -o the output is
written atomically: a failed report never leaves a partial file.`,
		Example: `  vgpu-probe report results.json
  vgpu-probe report results.json --format html -o report.html
  vgpu-probe report docs/bench/2026-11-27-h200-gromacs-current/alone-aa.runs.jsonl
  vgpu-probe report results.json --format perfetto -o trace.json
  vgpu-probe report --agent http://gpu-host-1:9477 --agent http://gpu-host-2:9477
  vgpu-probe report --prometheus http://prometheus:9090 --range 6h --match '{job="gpu-hosts"}'
  vgpu-probe report results.json --stats hybridsync-stats.json --nvml nvml.json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Results = args
			o.Out, o.Err, o.In = cmd.OutOrStdout(), cmd.ErrOrStderr(), cmd.InOrStdin()
			if err := o.complete(); err != nil {
				return usage.Wrap(err)
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return Run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Format, "format", "text", "output format: "+strings.Join(Formats(), ", "))
	f.StringVarP(&o.Output, "output", "o", "", "write to FILE (atomically) instead of stdout")
	f.StringArrayVar(&o.Agents, "agent", nil, "agent URL (http://HOST:PORT) to read live; repeat for several hosts")
	f.StringArrayVar(&o.Stats, "stats", nil, "hybridsync stats file (HYBRIDSYNC_STATS); repeatable")
	f.StringArrayVar(&o.NVML, "nvml", nil, "NVML samples file; repeatable")
	f.IntVar(&o.Timeline, "timeline", 5, "seconds of each agent VM's switch timeline to fetch for html/perfetto (0: none)")
	f.DurationVar(&o.Timeout, "timeout", 10*time.Second, "time limit per agent request or Prometheus query")
	f.StringVar(&o.Prometheus, "prometheus", "", "Prometheus server (http://HOST:9090) that scrapes the agents: rank the whole fleet from it")
	f.StringVar(&o.Range, "range", "1h", "with --prometheus: the span rates and distributions are over (30s, 15m, 1h, 1d)")
	f.StringVar(&o.Match, "match", "", "with --prometheus: label matchers every query carries, e.g. '{job=\"gpu\"}'")
	cmd.ValidArgsFunction = complete.Files("json")
	complete.Flags(cmd, map[string]cobra.CompletionFunc{
		"format": complete.One(Formats()...),
		"output": complete.AnyFile,
		"stats":  complete.Files("json"),
		"nvml":   complete.Files("json"),
	})
	return cmd
}

func (o *Options) complete() error {
	if !slices.Contains(Formats(), o.Format) {
		return fmt.Errorf("--format %q: want one of %s", o.Format, strings.Join(Formats(), ", "))
	}
	if len(o.Results) == 0 && len(o.Agents) == 0 && len(o.Stats) == 0 && len(o.NVML) == 0 && o.Prometheus == "" {
		return fmt.Errorf("nothing to report: give RESULTS.json, --agent URL, --prometheus URL, --stats FILE or --nvml FILE")
	}
	if n := load.CountStdin(o.Results, o.Stats, o.NVML); n > 1 {
		return fmt.Errorf("- (stdin) given %d times: it can be read once", n)
	}
	if o.Timeline < 0 || o.Timeout <= 0 {
		return fmt.Errorf("--timeline must be >= 0 and --timeout > 0")
	}
	for _, a := range o.Agents {
		if _, err := agentapi.New(a, nil); err != nil {
			return err
		}
	}
	if err := o.completePrometheus(); err != nil {
		return err
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: o.Timeout}
	}
	if o.Err == nil {
		o.Err = io.Discard
	}
	if o.In == nil {
		o.In = os.Stdin
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}

// completePrometheus checks --prometheus, --range and --match before any
// query is sent.
func (o *Options) completePrometheus() error {
	if o.Prometheus == "" {
		if o.Match != "" {
			return fmt.Errorf("--match needs --prometheus")
		}
		return nil
	}
	if err := promsource.CheckURL(o.Prometheus); err != nil {
		return err
	}
	var err error
	if o.promRange, err = promsource.ParseRange(o.Range); err != nil {
		return err
	}
	o.promMatch, err = promsource.ParseSelector(o.Match)
	return err
}

// Run reads the inputs, builds the report and writes it. Unreadable or
// malformed inputs and agents that do not answer are bad input (exit 2);
// the output file is only created, whole, once the report is rendered.
func Run(ctx context.Context, o *Options) error {
	lo := load.Options{Results: o.Results, Stats: o.Stats, NVML: o.NVML, Agents: o.Agents, Prometheus: o.Prometheus,
		Range: o.promRange, Match: o.promMatch, Timeout: o.Timeout, Client: o.HTTPClient, In: o.In, Err: o.Err,
		Now: o.Now(), ParseResults: parseResults}
	// Timelines only feed the plots and the trace.
	if o.Format == "html" || o.Format == "perfetto" {
		lo.Timeline = o.Timeline
	}
	in, err := load.Inputs(ctx, lo)
	if err != nil {
		if ctx.Err() != nil {
			// Interrupted, not bad input: main exits 128+signal.
			return err
		}
		return usage.Wrap(err)
	}
	r, err := model.Build(in)
	if err != nil {
		return usage.Wrap(err)
	}
	var buf bytes.Buffer
	if err := renderers[o.Format](&buf, r); err != nil {
		// Renderers fail only on data they cannot draw (absurd values
		// in an input), so this too is bad input.
		return usage.Wrap(fmt.Errorf("render %s: %w", o.Format, err))
	}
	if o.Output == "" {
		_, err := o.Out.Write(buf.Bytes())
		return err
	}
	if err := results.WriteAtomic(o.Output, buf.Bytes()); err != nil {
		return fmt.Errorf("write %s: %w", o.Output, err)
	}
	// The temporary file was private (0600); a report is for sharing.
	return os.Chmod(o.Output, 0o644)
}

// parseResults parses a results file, or the raw runs.jsonl that `apps`
// writes as it goes (its runs become the results document apps writes at
// its end, so that an interrupted or older apps run reports too).
func parseResults(name string, b []byte) (model.ResultsInput, error) {
	in, err := model.ParseResults(name, b)
	if err == nil {
		return in, nil
	}
	runs, rerr := apptable.ParseRuns(name, b)
	if rerr != nil || len(runs) == 0 {
		return in, err
	}
	programs, contentions, arms := apptable.Present(runs)
	doc, jerr := json.Marshal(suite.ResultsFile(runs, programs, contentions, arms, 0, 0, 0, results.Machine{Hostname: "unknown"}))
	if jerr != nil {
		return in, jerr
	}
	// Parsed as any results file: the runs' numbers get the same checks.
	return model.ParseResults(name, doc)
}
