package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/assembly"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/discover"
	"github.com/vgpu-probe/vgpu-probe/agent/discover/discovertest"
	"github.com/vgpu-probe/vgpu-probe/agent/hints"
	"github.com/vgpu-probe/vgpu-probe/agent/libvirt/libvirttest"
	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/agent/model"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
	"github.com/vgpu-probe/vgpu-probe/vmimages"
)

// runOnce runs the agent as `agent --once D --json` with c's targets and
// returns the snapshot it prints.
func runOnce(t *testing.T, c *Config, d time.Duration) model.Snapshot {
	t.Helper()
	snap, err := once(t, c, d)
	if errors.Is(err, bpfload.ErrPermission) {
		t.Skipf("kernel does not let root load BPF: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// once is runOnce for another goroutine than the test's.
func once(t *testing.T, c *Config, d time.Duration) (model.Snapshot, error) {
	var out bytes.Buffer
	c.Once, c.JSON, c.Window, c.TraceEvery, c.TraceWindow = d, true, time.Minute, 10*time.Second, time.Second
	c.Out, c.Log = &out, zerolog.New(zerolog.NewTestWriter(t))
	if err := Run(context.Background(), c); err != nil {
		return model.Snapshot{}, err
	}
	var snap model.Snapshot
	if err := json.Unmarshal(out.Bytes(), &snap); err != nil {
		return snap, fmt.Errorf("stdout is not a JSON snapshot: %w\n%s", err, out.String())
	}
	return snap, nil
}

// `agent --discover --once` on a QEMU started without libvirt reports it
// as domain NAME with its two vCPUs, from QEMU's thread names
// (debug-threads=on) or, without them, from its QMP socket.
func TestOnceDiscoversQEMU(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the agent loads eBPF programs: needs root")
	}
	for _, c := range []struct{ name, sock string }{{"once-dt", ""}, {"once-qmp", filepath.Join(t.TempDir(), "qmp.sock")}} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"-name", "guest=" + c.name + ",debug-threads=on", "-smp", "2"}
			if c.sock != "" {
				args = []string{"-name", "guest=" + c.name, "-smp", "2", "-qmp", "unix:" + c.sock + ",server=on,wait=off"}
			}
			q := discovertest.QEMU(t, args...)
			time.Sleep(time.Second) // QEMU creates its vCPU threads and socket
			snap := runOnce(t, &Config{Discover: true}, 2*time.Second)
			tg := domainIn(snap, c.name)
			if tg == nil {
				t.Fatalf("domain %s (pid %d) not in the snapshot: %+v", c.name, q.Process.Pid, snap.Targets)
			}
			if len(tg.Threads) != 2 || tg.Threads[0].VCPU != 0 || tg.Threads[1].VCPU != 1 || tg.Gone {
				t.Fatalf("domain %s: threads %+v gone=%v, want vCPUs 0 and 1", c.name, tg.Threads, tg.Gone)
			}
		})
	}
}

// A libvirt domain is also a QEMU process discovery finds: with both
// --libvirt-uri and --discover it is one target, libvirt's (one Added,
// never a Removed), whether it ran before the agent started or started
// while it ran.
func TestLibvirtAndDiscoverOneTarget(t *testing.T) {
	l := libvirttest.Connect(t) // skips, saying why, without root or libvirtd
	before := libvirttest.StartDomain(t, l, vmimages.Domain{VCPUs: 1})
	src, err := newLibvirtSource(libvirttest.Socket(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	merged := discover.Merge(src.(discover.Owner), discover.NewSource(discover.Options{Log: zerolog.Nop()}))
	ch := merged.Run(ctx)
	events := make(chan []targets.Event, 1)
	go func() {
		var evs []targets.Event
		for ev := range ch {
			evs = append(evs, ev)
		}
		events <- evs
	}()
	time.Sleep(1500 * time.Millisecond)
	during := libvirttest.StartDomain(t, l, vmimages.Domain{VCPUs: 1})

	// Not vacuous: discovery alone finds both domains' QEMUs, under the
	// names libvirt gives them.
	deadline := time.Now().Add(20 * time.Second)
	for missing := 2; missing > 0; {
		vms, err := discover.NewScanner(discover.Options{}).Scan()
		if err != nil {
			t.Fatal(err)
		}
		missing = 2
		for _, vm := range vms {
			if vm.Name == before.Name || vm.Name == during.Name {
				missing--
			}
		}
		if missing > 0 && time.Now().After(deadline) {
			t.Fatalf("discovery does not find the domains' QEMUs: %+v", vms)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Past the longest a discovered VM waits for libvirt to claim it.
	time.Sleep(discover.LibvirtSettle + 2*discover.MinEvery)
	cancel()
	evs := <-events
	for _, name := range []string{before.Name, during.Name} {
		added := 0
		for _, ev := range evs {
			if ev.Target.Name != name && !strings.HasPrefix(ev.Target.Name, name+"@") {
				continue
			}
			if ev.Kind == targets.Removed {
				t.Errorf("%s: removed while running: %+v", name, ev.Target)
			}
			added++
		}
		if added != 1 {
			t.Errorf("domain %s: %d Added events, want libvirt's one", name, added)
		}
	}
}

// --mitigate treats a discovered VM as a libvirt domain: its vCPU threads
// and QEMU's main thread get the slice, and have it back at stop.
func TestDiscoverMitigate(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("setting other processes' slices needs root")
	}
	q := discovertest.QEMU(t, "-name", "guest=mit-disc,debug-threads=on", "-smp", "2")
	ag, err := assembly.Start(context.Background(), assembly.Options{Mitigation: &mitigate.Config{Slice: 100 * time.Microsecond}, Log: zerolog.Nop()})
	if errors.Is(err, mitigate.ErrUnsupported) {
		t.Skipf("custom EEVDF slices not available here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Close()
	events := make(chan targets.Event, 64)
	ag.Follow(seen{discover.NewSource(discover.Options{Log: zerolog.Nop()}), events})
	var tg targets.Target
	for timeout := time.After(30 * time.Second); len(tg.Threads) < 2; {
		select {
		case ev := <-events:
			if ev.Kind == targets.Added && ev.Target.Name == "mit-disc" {
				tg = ev.Target
			}
		case <-timeout:
			t.Fatalf("QEMU mit-disc (pid %d) not discovered with 2 vCPUs after 30s", q.Process.Pid)
		}
	}
	tids := []int{tg.Threads[0].TID, tg.Threads[1].TID, q.Process.Pid}
	for _, tid := range tids {
		var got uint64
		for deadline := time.Now().Add(10 * time.Second); got != 100_000 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			a, err := unix.SchedGetAttr(tid, 0)
			if err != nil {
				t.Fatal(err)
			}
			got = a.Runtime
		}
		if got != 100_000 {
			t.Errorf("thread %d: slice %d ns, want 100000", tid, got)
		}
	}
	ag.Close()
	for _, tid := range tids {
		a, err := unix.SchedGetAttr(tid, 0)
		if err != nil {
			t.Fatal(err)
		}
		if a.Runtime == 100_000 || a.Runtime == 0 {
			t.Errorf("thread %d: slice %d ns after stop, want the default back", tid, a.Runtime)
		}
	}
}

// The arguments `agent hints-args` prints are ones QEMU takes, and the
// agent's --hints page for a discovered QEMU is the file QEMU maps: while
// the agent runs, that file holds a vCPU page (which stays, mapped by
// QEMU, when the agent stops: pages_test.go).
func TestHintsArgsQEMU(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the agent loads eBPF programs: needs root")
	}
	dir := t.TempDir()
	// What hints-args does before it prints the arguments.
	if _, err := hints.PreparePage(dir, "hint-disc", 0, 0); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-name", "guest=hint-disc,debug-threads=on", "-smp", "2"}, hintpage.QEMUArgs(dir, "hint-disc")...)
	discovertest.QEMU(t, args...)
	time.Sleep(time.Second) // QEMU creates its vCPU threads
	type result struct {
		snap model.Snapshot
		err  error
	}
	done := make(chan result, 1)
	go func() {
		snap, err := once(t, &Config{Discover: true, Hints: dir}, 4*time.Second)
		done <- result{snap, err}
	}()
	// Read until the page is there or the agent has stopped (its start,
	// loading the eBPF programs, takes seconds on a busy machine).
	path := filepath.Join(dir, hintpage.FileName("hint-disc"))
	var pageErr error
	var hdr hintpage.Header
	size := 0
	var r result
	for ran := true; ran; {
		select {
		case r = <-done:
			ran = false
		case <-time.After(50 * time.Millisecond):
		}
		b, err := os.ReadFile(path)
		if err != nil {
			pageErr = err
			continue
		}
		pg, err := hintpage.Parse(b)
		if pageErr = err; err == nil {
			hdr, size = pg.Header(), len(b)
			if ran {
				r = <-done
			}
			break
		}
	}
	if errors.Is(r.err, bpfload.ErrPermission) {
		t.Skipf("kernel does not let root load BPF: %v", r.err)
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if domainIn(r.snap, "hint-disc") == nil {
		t.Fatalf("domain hint-disc not in the snapshot: %+v", r.snap.Targets)
	}
	if pageErr != nil {
		t.Fatalf("QEMU's page file while the agent ran: %v", pageErr)
	}
	if hdr.Slots < 2 || hdr.Flags&hintpage.FlagVCPU == 0 || size != hintpage.ShmemSizeMiB<<20 {
		t.Errorf("page: %+v, %d bytes; want a vCPU page of 2 slots or more in QEMU's %d MiB", hdr, size, hintpage.ShmemSizeMiB)
	}
}
