package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/model"
	"github.com/vgpu-probe/vgpu-probe/agent/procstat"
)

// signalWriter closes seen the first time a line containing want is
// written: the agent's log saying it watches its target, when the --once
// clock starts.
type signalWriter struct {
	mu   sync.Mutex
	want string
	buf  bytes.Buffer
	seen chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.seen != nil && strings.Contains(w.buf.String(), w.want) {
		close(w.seen)
		w.seen = nil
	}
	return len(p), nil
}

// The real thing: a busy process that exits half-way through --once 3s
// --json is in the snapshot, gone, with what it ran until then.
func TestOnceKeepsExitedTarget(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the agent loads eBPF programs: needs root")
	}
	child := exec.Command("/bin/sh", "-c", "while :; do :; done")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	pid := child.Process.Pid
	var reap sync.Once
	end := func() { reap.Do(func() { child.Process.Kill(); child.Wait() }) }
	defer end()

	logw := &signalWriter{want: "watching target", seen: make(chan struct{})}
	seen := logw.seen
	// The kernel's count of what it ran while watched, read just after the
	// agent said it watches it and just before the kill.
	type kill struct {
		at  time.Time
		ran time.Duration
	}
	killed := make(chan kill, 1)
	go func() {
		select {
		case <-seen:
		case <-time.After(20 * time.Second):
		}
		c0, err0 := procstat.Read(pid)
		time.Sleep(1500 * time.Millisecond)
		c1, err1 := procstat.Read(pid)
		k := kill{at: time.Now(), ran: time.Duration(c1.RunNs - c0.RunNs)}
		end() // killed and reaped: its /proc entry is gone
		if err0 != nil || err1 != nil {
			k.ran = -1
		}
		killed <- k
	}()

	var out bytes.Buffer
	c := &Config{PIDs: []int{pid}, Once: 3 * time.Second, JSON: true, Window: time.Minute,
		TraceEvery: 10 * time.Second, TraceWindow: time.Second, Out: &out, Log: zerolog.New(logw)}
	if err := Run(context.Background(), c); err != nil {
		if errors.Is(err, bpfload.ErrPermission) {
			t.Skipf("kernel does not let root load BPF: %v", err)
		}
		t.Fatal(err)
	}
	var k kill
	select {
	case k = <-killed:
	default:
		t.Fatalf("the agent finished before the process was killed; its log:\n%s", logw.buf.String())
	}
	var snap model.Snapshot
	if err := json.Unmarshal(out.Bytes(), &snap); err != nil {
		t.Fatalf("stdout is not a JSON snapshot: %v\n%s", err, out.String())
	}
	if len(snap.Targets) != 1 {
		t.Fatalf("targets %+v, want the exited process", snap.Targets)
	}
	tg := snap.Targets[0]
	if tg.Kind != "pid" || tg.Name != fmt.Sprint(pid) || !tg.Gone {
		t.Fatalf("target %s/%s gone=%v, want pid/%d gone", tg.Kind, tg.Name, tg.Gone, pid)
	}
	// It went when the programs saw it leave the CPU for the last time,
	// not when the agent noticed (up to a rescan, 2 s, later).
	if tg.GoneAt.Before(k.at.Add(-time.Millisecond)) || tg.GoneAt.After(k.at.Add(250*time.Millisecond)) {
		t.Errorf("gone at %v, want just after the kill at %v", tg.GoneAt, k.at)
	}
	if len(tg.Threads) != 1 || !tg.Threads[0].Gone {
		t.Fatalf("threads %+v, want its one thread, gone", tg.Threads)
	}
	// Busy for ~1.5 s of the 3, sharing the CPUs with whatever else runs
	// here: what the kernel counted between the two reads, which are a few
	// ms off the watch and the exit.
	if k.ran < 0 {
		t.Fatal("could not read the process's counters")
	}
	rs := tg.Threads[0].RunSeconds
	if rs <= 0 || math.Abs(rs-k.ran.Seconds()) > 0.1+0.1*k.ran.Seconds() {
		t.Errorf("run_seconds %.3f, the kernel counted %.3f s", rs, k.ran.Seconds())
	}
	if snap.WindowSeconds <= 0 {
		t.Errorf("window_seconds %g", snap.WindowSeconds)
	}
	t.Logf("gone %.3fs after the kill, %.3fs before the snapshot; ran %.3fs (kernel: %.3fs)",
		tg.GoneAt.Sub(k.at).Seconds(), snap.Time.Sub(tg.GoneAt).Seconds(), rs, k.ran.Seconds())
}

// The table shows a "gone" column only when something went.
func TestWriteTableGone(t *testing.T) {
	at := time.Date(2026, 11, 26, 12, 0, 3, 0, time.UTC)
	snap := model.Snapshot{Time: at, Targets: []model.Target{
		{Name: "111", Kind: "pid", Threads: []model.Thread{{TID: 111, VCPU: -1, RunSeconds: 3}}},
		{Name: "222", Kind: "pid", Gone: true, GoneAt: at.Add(-1500 * time.Millisecond),
			Threads: []model.Thread{{TID: 222, VCPU: -1, RunSeconds: 1.5, Gone: true, GoneAt: at.Add(-1500 * time.Millisecond)}}},
	}}
	var b bytes.Buffer
	if err := writeTable(&b, &snap); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[0], "gone") || !strings.HasSuffix(lines[1], " -") ||
		!strings.HasSuffix(lines[2], "1.5s ago") || !strings.Contains(lines[2], "1.500") {
		t.Errorf("table:\n%s", b.String())
	}
	b.Reset()
	snap.Targets = snap.Targets[:1]
	if err := writeTable(&b, &snap); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "gone") {
		t.Errorf("a gone column with nothing gone:\n%s", b.String())
	}
}
