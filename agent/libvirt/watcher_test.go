package libvirt_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	lv "github.com/digitalocean/go-libvirt"
	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/libvirt"
	"github.com/vgpu-probe/vgpu-probe/agent/libvirt/libvirttest"
	"github.com/vgpu-probe/vgpu-probe/vmimages"
)

// eventWait bounds every wait for an event. It is a hang guard, not a
// performance assertion: TCG guests on a loaded 2-core CI machine are slow.
const eventWait = 90 * time.Second

func testLogger(t *testing.T) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel).With().Timestamp().Logger()
}

// waitEvent returns the first event of kind for the named domain, skipping
// events of other domains (other tests may run domains at the same time).
// It fails on a Removed for any domain in forbidden.
func waitEvent(t *testing.T, ch <-chan libvirt.Event, kind libvirt.EventKind, name string, forbidden ...string) libvirt.Event {
	t.Helper()
	timeout := time.After(eventWait)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("event channel closed while waiting for %v %s", kind, name)
			}
			t.Logf("event: %v %s (id %d, %d vCPUs)", ev.Kind, ev.Domain.Name, ev.Domain.ID, len(ev.Domain.VCPUs))
			if ev.Kind == libvirt.Removed && slices.Contains(forbidden, ev.Domain.Name) {
				t.Fatalf("unexpected Removed for %s (it still runs)", ev.Domain.Name)
			}
			if ev.Kind == kind && ev.Domain.Name == name {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %v event for %s within %s", kind, name, eventWait)
		}
	}
}

// waitAdded waits until every named domain was Added, in any order.
func waitAdded(t *testing.T, ch <-chan libvirt.Event, names ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	timeout := time.After(eventWait)
	for len(want) > 0 {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("event channel closed while waiting for Added %v", want)
			}
			if ev.Kind == libvirt.Added {
				delete(want, ev.Domain.Name)
			}
		case <-timeout:
			t.Fatalf("no Added for %v within %s", want, eventWait)
		}
	}
}

func newWatcher(t *testing.T, opts ...libvirt.Option) (*libvirt.Watcher, <-chan libvirt.Event, context.CancelFunc) {
	t.Helper()
	w, err := libvirt.NewWatcher(libvirttest.Socket(), testLogger(t), opts...)
	if err != nil {
		t.Fatalf("NewWatcher: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	events := w.Run(ctx)
	t.Cleanup(func() {
		cancel()
		// The channel must close once ctx is done; drain until it does.
		timeout := time.After(eventWait)
		for {
			select {
			case _, ok := <-events:
				if !ok {
					return
				}
			case <-timeout:
				t.Errorf("event channel still open %s after cancel", eventWait)
				return
			}
		}
	})
	return w, events, cancel
}

func domainNames(ds []libvirt.Domain) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Name)
	}
	return out
}

func TestWatcherFollowsDomains(t *testing.T) {
	l := libvirttest.Connect(t)

	// Started before the watcher: must be in the initial list.
	pre := libvirttest.StartDomain(t, l, vmimages.Domain{VCPUs: 1})

	w, events, _ := newWatcher(t, libvirt.WithRefresh(time.Second))
	waitEvent(t, events, libvirt.Added, pre.Name)

	// Pin the two vCPUs to different host CPUs where there are two.
	last := runtime.NumCPU() - 1
	name := libvirttest.Name(t)
	spec := vmimages.Domain{
		Name:     name,
		Shmem:    &vmimages.Shmem{Name: name, SizeMiB: 2},
		VCPUs:    2,
		Pin:      [][]int{{0}, {last}},
		PeriodUS: 100000,
		QuotaUS:  50000,
	}
	d := libvirttest.StartDomain(t, l, spec)
	ev := waitEvent(t, events, libvirt.Added, d.Name)
	got := ev.Domain

	pid, err := libvirttest.QEMUPid(d.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got.PID != pid {
		t.Errorf("PID = %d, want the QEMU pid %d", got.PID, pid)
	}
	if want := formatUUID(d.UUID); got.UUID != want || got.ID != int(d.ID) {
		t.Errorf("UUID/ID = %s/%d, want %s/%d", got.UUID, got.ID, want, d.ID)
	}
	if len(got.VCPUs) != 2 {
		t.Fatalf("VCPUs = %+v, want 2", got.VCPUs)
	}
	for i, v := range got.VCPUs {
		if v.Index != i {
			t.Errorf("vCPU %d: Index %d", i, v.Index)
		}
		// The thread must be a thread of the QEMU process, named for the vCPU
		// (libvirt starts QEMU with debug-threads=on).
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", pid, v.TID))
		if err != nil {
			t.Errorf("vCPU %d: TID %d is not a thread of QEMU pid %d: %v", i, v.TID, pid, err)
			continue
		}
		if c := strings.TrimSpace(string(comm)); !strings.HasPrefix(c, fmt.Sprintf("CPU %d/", i)) {
			t.Errorf("vCPU %d: thread %d is %q, want \"CPU %d/TCG\"", i, v.TID, c, i)
		}
	}
	if got.VCPUs[0].TID == got.VCPUs[1].TID {
		t.Errorf("both vCPUs report thread %d", got.VCPUs[0].TID)
	}
	if last > 0 {
		if !slices.Equal(got.VCPUs[0].CPUs, []int{0}) || !slices.Equal(got.VCPUs[1].CPUs, []int{last}) {
			t.Errorf("pinning = %v / %v, want [0] / [%d]", got.VCPUs[0].CPUs, got.VCPUs[1].CPUs, last)
		}
	} else {
		t.Log("one host CPU: pinning to it is no pinning, not checked")
	}
	if got.PeriodUS != 100000 || got.QuotaUS != 50000 {
		t.Errorf("period/quota = %d/%d, want 100000/50000", got.PeriodUS, got.QuotaUS)
	}
	if !slices.Contains(domainNames(w.Domains()), d.Name) {
		t.Errorf("Domains() = %v, want it to contain %s", domainNames(w.Domains()), d.Name)
	}
	// The guest really boots (the kernel sees both vCPUs).
	libvirttest.WaitSerial(t, d.SerialLog, vmimages.ReadyLine+" cpus=2", eventWait)
	// The ivshmem-plain device is backed by /dev/shm/NAME of the size asked.
	if st, err := os.Stat(filepath.Join("/dev/shm", name)); err != nil {
		t.Errorf("ivshmem backing file: %v", err)
	} else if st.Size() != 2<<20 {
		t.Errorf("ivshmem backing file: %d bytes, want 2 MiB", st.Size())
	}

	// A live bandwidth change (virsh schedinfo --live) is an Added again.
	quota := lv.TypedParam{Field: "vcpu_quota", Value: *lv.NewTypedParamValueLlong(20000)}
	if err := l.DomainSetSchedulerParametersFlags(d.Domain, []lv.TypedParam{quota}, uint32(lv.DomainAffectLive)); err != nil {
		t.Fatalf("set vcpu_quota: %v", err)
	}
	for {
		ev := waitEvent(t, events, libvirt.Added, d.Name)
		if ev.Domain.QuotaUS == 20000 {
			if ev.Domain.VCPUs[0].TID != got.VCPUs[0].TID {
				t.Errorf("quota change reported new threads %+v", ev.Domain.VCPUs)
			}
			break
		}
	}

	if err := l.DomainDestroy(d.Domain); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	ev = waitEvent(t, events, libvirt.Removed, d.Name, pre.Name)
	if ev.Domain.UUID != got.UUID {
		t.Errorf("Removed UUID %s, want %s", ev.Domain.UUID, got.UUID)
	}
	if slices.Contains(domainNames(w.Domains()), d.Name) {
		t.Errorf("Domains() still has %s after Removed", d.Name)
	}
	if !slices.Contains(domainNames(w.Domains()), pre.Name) {
		t.Errorf("Domains() lost %s", pre.Name)
	}
}

func TestWatcherSurvivesLibvirtdRestart(t *testing.T) {
	l := libvirttest.Connect(t)
	stays := libvirttest.StartDomain(t, l, vmimages.Domain{VCPUs: 1})
	dies := libvirttest.StartDomain(t, l, vmimages.Domain{VCPUs: 1})

	_, events, _ := newWatcher(t, libvirt.WithMaxBackoff(time.Second))
	waitAdded(t, events, stays.Name, dies.Name)
	diesPid, err := libvirttest.QEMUPid(dies.Name)
	if err != nil {
		t.Fatal(err)
	}

	libvirttest.StopLibvirtd(t)
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			libvirttest.StartLibvirtd(t)
		}
	})
	// While libvirtd is away, one QEMU dies: the watcher must notice on
	// reconnect, from the new listing, since no event can tell it.
	if err := syscall.Kill(diesPid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill qemu of %s: %v", dies.Name, err)
	}
	libvirttest.StartLibvirtd(t)
	restarted = true

	l2 := libvirttest.Connect(t)
	fresh := libvirttest.StartDomain(t, l2, vmimages.Domain{VCPUs: 1})

	seenRemoved, seenAdded := false, false
	timeout := time.After(eventWait)
	for !seenRemoved || !seenAdded {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("event channel closed")
			}
			t.Logf("event: %v %s", ev.Kind, ev.Domain.Name)
			switch {
			case ev.Kind == libvirt.Removed && ev.Domain.Name == stays.Name:
				t.Fatalf("Removed %s, which kept running through the restart", stays.Name)
			case ev.Kind == libvirt.Removed && ev.Domain.Name == dies.Name:
				seenRemoved = true
			case ev.Kind == libvirt.Added && ev.Domain.Name == fresh.Name:
				seenAdded = true
			}
		case <-timeout:
			t.Fatalf("after the restart: Removed %s seen %v, Added %s seen %v, within %s",
				dies.Name, seenRemoved, fresh.Name, seenAdded, eventWait)
		}
	}
}

func TestNewWatcherUnreachable(t *testing.T) {
	dir := t.TempDir()

	// Nothing at the path.
	missing := filepath.Join(dir, "missing-sock")
	_, err := libvirt.NewWatcher(missing, testLogger(t))
	if err == nil || !strings.Contains(err.Error(), missing) || !errors.Is(err, syscall.ENOENT) {
		t.Errorf("missing socket: error %v, want ENOENT naming %s", err, missing)
	}

	// A socket that accepts but never answers, like a wedged daemon.
	silent := filepath.Join(dir, "silent-sock")
	ln, err := net.Listen("unix", silent)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	done := make(chan error, 1)
	go func() {
		_, err := libvirt.NewWatcher("qemu:///system?socket="+silent, testLogger(t), libvirt.WithTimeout(500*time.Millisecond))
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "no answer within") {
			t.Errorf("silent socket: error %v, want \"no answer within\"", err)
		}
	case <-time.After(eventWait):
		t.Fatalf("NewWatcher on a silent socket still blocked after %s", eventWait)
	}
	ln.Close()
	for c := range accepted {
		c.Close()
	}

	// URIs this package cannot serve.
	for _, uri := range []string{"qemu+ssh://host/system", "qemu:///session", "not a uri"} {
		if _, err := libvirt.NewWatcher(uri, testLogger(t)); !errors.Is(err, libvirt.ErrUnsupportedURI) {
			t.Errorf("NewWatcher(%q) error = %v, want ErrUnsupportedURI", uri, err)
		}
	}
}

func formatUUID(u lv.UUID) string {
	s := fmt.Sprintf("%x", u[:])
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:]
}
