// Package load reads everything a report joins, as `vgpu-probe report`
// names it: results, hybridsync stats and NVML files (or stdin), live
// agents and a Prometheus server. Every input is bounded (input.MaxBytes)
// and checked as it is parsed; the first that fails ends the load with an
// error naming it.
package load

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"time"

	"github.com/vgpu-probe/vgpu-probe/input"
	"github.com/vgpu-probe/vgpu-probe/nvml"
	"github.com/vgpu-probe/vgpu-probe/profiler/agentapi"
	"github.com/vgpu-probe/vgpu-probe/profiler/promsource"
	"github.com/vgpu-probe/vgpu-probe/profiler/report"
)

// Stdin is the input name that reads standard input.
const Stdin = "-"

// Options say what to read.
type Options struct {
	Results, Stats, NVML []string // files, or Stdin
	Agents               []string // agent URLs
	// Timeline is how many seconds of each agent target's switch
	// timeline to fetch (0: none; only plots and traces draw them).
	Timeline int
	// Prometheus is a server that scrapes the agents ("": none), asked
	// over Range with the matchers of Match, each query within Timeout.
	Prometheus string
	Range      time.Duration
	Match      promsource.Selector
	Timeout    time.Duration
	Client     *http.Client
	In         io.Reader // what Stdin reads
	Err        io.Writer // where what is missing from an agent is said
	Now        time.Time // dates a report of inputs that carry no time
	// ParseResults parses one results file; nil: report.ParseResults.
	ParseResults func(name string, b []byte) (report.ResultsInput, error)
}

// CountStdin counts the inputs of lists named Stdin, which can be read
// once.
func CountStdin(lists ...[]string) int {
	n := 0
	for _, l := range lists {
		for _, p := range l {
			if p == Stdin {
				n++
			}
		}
	}
	return n
}

// Inputs reads what o names, interruptibly by ctx.
func Inputs(ctx context.Context, o Options) (report.Inputs, error) {
	in := report.Inputs{Now: o.Now}
	parse := o.ParseResults
	if parse == nil {
		parse = report.ParseResults
	}
	var err error
	if in.Results, err = parseAll(ctx, o, o.Results, parse); err != nil {
		return in, err
	}
	if in.Stats, err = parseAll(ctx, o, o.Stats, report.ParseStats); err != nil {
		return in, err
	}
	if in.NVML, err = parseAll(ctx, o, nvmlFiles(o), parseNVML); err != nil {
		return in, err
	}
	for _, u := range o.Agents {
		a, err := agent(ctx, o, u)
		if err != nil {
			return in, err
		}
		in.Agents = append(in.Agents, a)
	}
	if o.Prometheus != "" {
		fleet, err := promsource.Load(ctx, promsource.Options{URL: o.Prometheus, Range: o.Range, Match: o.Match,
			Timeout: o.Timeout, Client: o.Client, Now: in.Now})
		if err != nil {
			return in, err
		}
		in.Agents = append(in.Agents, fleet...)
		in.Notes = append(in.Notes, promsource.WindowNotes(fleet, o.Range)...)
	}
	return in, nil
}

// agent reads one live agent's snapshot and, where asked, its targets'
// timelines.
func agent(ctx context.Context, o Options, url string) (report.AgentInput, error) {
	c, err := agentapi.New(url, o.Client)
	if err != nil {
		return report.AgentInput{}, err
	}
	snap, err := c.Snapshot(ctx)
	if err != nil {
		return report.AgentInput{}, err
	}
	if err := report.CheckSnapshot(snap); err != nil {
		return report.AgentInput{}, fmt.Errorf("agent %s: snapshot: %w", c.URL(), err)
	}
	a := report.AgentInput{URL: c.URL(), Snapshot: snap, Timelines: map[string][]agentapi.OffCPU{}}
	if o.Timeline <= 0 {
		return a, nil
	}
	for _, t := range snap.Targets {
		evs, err := c.Timeline(ctx, t.Name, o.Timeline)
		if err != nil {
			// An agent too old to serve timelines still ranks its
			// VMs; say what is missing.
			if o.Err != nil {
				fmt.Fprintf(o.Err, "vgpu-probe: %v (the report goes on without it)\n", err)
			}
			continue
		}
		a.Timelines[t.Name] = evs
	}
	return a, nil
}

// nvmlFiles returns the NVML files named and the NVML samples that
// `vgpu-probe run` left beside each results file, each once.
func nvmlFiles(o Options) []string {
	files := slices.Clone(o.NVML)
	for _, p := range o.Results {
		if p == Stdin {
			continue
		}
		found, _ := filepath.Glob(filepath.Join(filepath.Dir(p), "nvml-*.json"))
		for _, f := range found {
			if !slices.Contains(files, f) {
				files = append(files, f)
			}
		}
	}
	return files
}

// parseAll reads each of paths (bounded, interruptible by ctx) and parses
// it with parse.
func parseAll[T any](ctx context.Context, o Options, paths []string, parse func(string, []byte) (T, error)) ([]T, error) {
	var out []T
	for _, p := range paths {
		var b []byte
		var err error
		if p == Stdin {
			b, err = input.ReadFrom(ctx, "- (stdin)", o.In)
		} else {
			b, err = input.ReadFile(ctx, p)
		}
		if err != nil {
			return nil, err
		}
		if b, err = gunzip(ctx, p, b); err != nil {
			return nil, err
		}
		v, err := parse(p, b)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func parseNVML(name string, b []byte) (report.NVMLInput, error) {
	s, err := nvml.ParseSeries(name, b)
	return report.NVMLInput{Path: name, Series: s}, err
}

// gunzip returns b decompressed where it is gzip's (results and
// runs.jsonl kept compressed, as docs/bench keeps them), bounded as any
// input; else b.
func gunzip(ctx context.Context, name string, b []byte) ([]byte, error) {
	if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		return b, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	out, err := input.ReadFrom(ctx, name, zr)
	if err != nil {
		return nil, err
	}
	if err := zr.Close(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}
