package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/vgpu-probe/vgpu-probe/results"
)

// tracer is a tracefs instance recording sched_switch on one CPU.
type tracer struct{ dir string }

const tracefs = "/sys/kernel/tracing"

func newTracer(cpu int) (*tracer, error) {
	if _, err := os.Stat(filepath.Join(tracefs, "instances")); err != nil {
		return nil, err
	}
	dir := filepath.Join(tracefs, "instances", fmt.Sprintf("vgpu-probe-mksample-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	t := &tracer{dir: dir}
	for _, w := range [][2]string{
		{"trace_clock", "mono"},
		{"tracing_cpumask", fmt.Sprintf("%x", uint64(1)<<cpu)},
		{"buffer_size_kb", "16384"},
		{"events/sched/sched_switch/enable", "1"},
		{"tracing_on", "0"},
	} {
		if err := os.WriteFile(filepath.Join(dir, w[0]), []byte(w[1]), 0); err != nil {
			t.close()
			return nil, fmt.Errorf("%s: %w", w[0], err)
		}
	}
	return t, nil
}

func (t *tracer) start() {
	os.WriteFile(filepath.Join(t.dir, "trace"), nil, 0) // clear
	os.WriteFile(filepath.Join(t.dir, "tracing_on"), []byte("1"), 0)
}

func (t *tracer) stop() { os.WriteFile(filepath.Join(t.dir, "tracing_on"), []byte("0"), 0) }

func (t *tracer) close() {
	os.WriteFile(filepath.Join(t.dir, "events/sched/sched_switch/enable"), []byte("0"), 0)
	os.Remove(t.dir)
}

// tracks turns the switches into on/off intervals of the runner thread and
// of the co-runner (its threads merged), in ns since t0 (CLOCK_MONOTONIC).
func (t *tracer) tracks(t0 int64, runner int, co map[int]bool) ([]results.ThreadTrack, error) {
	f, err := os.Open(filepath.Join(t.dir, "trace"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type sw struct {
		ts         int64
		prev, next int
	}
	var sws []sw
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.Index(line, ": sched_switch: ")
		if i < 0 {
			continue
		}
		head := strings.Fields(line[:i])
		ts, err := parseTS(head[len(head)-1])
		if err != nil {
			continue
		}
		s := sw{ts: ts - t0, prev: field(line, "prev_pid="), next: field(line, "next_pid=")}
		sws = append(sws, s)
	}
	sort.Slice(sws, func(i, j int) bool { return sws[i].ts < sws[j].ts })
	who := func(tid int) string {
		switch {
		case tid == runner:
			return "runner vcpu0"
		case co[tid]:
			return "corunner1 vcpu0"
		}
		return ""
	}
	tracks := map[string]*results.ThreadTrack{
		"runner vcpu0":    {Name: "runner vcpu0", TID: runner},
		"corunner1 vcpu0": {Name: "corunner1 vcpu0"},
	}
	onSince := map[string]int64{}
	offSince := map[string]int64{}
	for _, s := range sws {
		if n := who(s.prev); n != "" {
			if st, ok := onSince[n]; ok {
				tracks[n].Intervals = append(tracks[n].Intervals, results.Interval{Start: st, End: s.ts, On: true})
				delete(onSince, n)
			}
			offSince[n] = s.ts
		}
		if n := who(s.next); n != "" {
			if st, ok := offSince[n]; ok {
				tracks[n].Intervals = append(tracks[n].Intervals, results.Interval{Start: st, End: s.ts, On: false})
				delete(offSince, n)
			}
			onSince[n] = s.ts
			if tracks[n].TID == 0 {
				tracks[n].TID = s.next
			}
		}
	}
	var out []results.ThreadTrack
	for _, n := range []string{"runner vcpu0", "corunner1 vcpu0"} {
		if len(tracks[n].Intervals) > 0 {
			out = append(out, *tracks[n])
		}
	}
	return out, sc.Err()
}

func parseTS(s string) (int64, error) {
	s = strings.TrimSuffix(s, ":")
	sec, frac, _ := strings.Cut(s, ".")
	a, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return 0, err
	}
	for len(frac) < 9 {
		frac += "0"
	}
	b, err := strconv.ParseInt(frac[:9], 10, 64)
	if err != nil {
		return 0, err
	}
	return a*1e9 + b, nil
}

func field(line, key string) int {
	i := strings.Index(line, key)
	if i < 0 {
		return -1
	}
	rest := line[i+len(key):]
	if j := strings.IndexByte(rest, ' '); j >= 0 {
		rest = rest[:j]
	}
	n, _ := strconv.Atoi(rest)
	return n
}

func jsonIndent(v any) ([]byte, error) { return json.MarshalIndent(v, "", "  ") }
