package hints

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/bpf"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
)

func newPublisher(t *testing.T) *Publisher {
	t.Helper()
	p, err := New(Options{Dir: t.TempDir(), Log: zerolog.Nop(),
		Owner: func(int) (int, int, error) { return os.Getuid(), os.Getgid(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func added(kind targets.Kind, name string, tids ...int) targets.Event {
	t := targets.Target{Kind: kind, Name: name}
	for i, tid := range tids {
		vcpu := -1
		if kind == targets.KindDomain {
			vcpu = i
		}
		t.Threads = append(t.Threads, targets.Thread{TID: tid, VCPU: vcpu})
	}
	return targets.Event{Kind: targets.Added, Target: t}
}

func TestOnePagePerTarget0600(t *testing.T) {
	p := newPublisher(t)
	p.Apply(added(targets.KindPID, "100", 100, 101))
	p.Apply(added(targets.KindPID, "200", 200))
	for _, name := range []string{"100", "200"} {
		fi, err := os.Stat(p.Path(name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: mode %v, want 0600", name, fi.Mode())
		}
	}
	// Thread 200 is not on page 100, and the reverse.
	a, _ := hintpage.Map(p.Path("100"))
	defer a.Close()
	var s hintpage.Slot
	if err := a.FindTID(200, &s); !errors.Is(err, hintpage.ErrNoSlot) {
		t.Fatalf("page of 100 has thread 200: %v", err)
	}
	if err := a.FindTID(101, &s); err != nil {
		t.Fatalf("page of 100 lacks 101: %v", err)
	}
	// A cgroup named like a pid target would share its file: refused.
	p.Apply(added(targets.KindCgroup, "100", 300))
	if _, ok := p.pages["cgroup/100"]; ok {
		t.Fatal("two targets share one page file")
	}
	p.Apply(targets.Event{Kind: targets.Removed, Target: targets.Target{Kind: targets.KindPID, Name: "200"}})
	p.reap() // what Run's reaper does (Apply only wakes it)
	if _, err := os.Stat(p.Path("200")); !os.IsNotExist(err) {
		t.Fatalf("page of a removed target still there: %v", err)
	}
}

func TestSwitchEventsPublish(t *testing.T) {
	p := newPublisher(t)
	p.Apply(added(targets.KindPID, "7", 7))
	f, err := hintpage.Map(p.Path("7"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	now := monoNow()
	// Five 4 ms slices, each preempted by a co-runner.
	for i := range 5 {
		in := now - uint64(5-i)*8_000_000
		p.OnEvent(&bpf.SchedSwitchEvent{InNs: in, OffNs: 4_000_000, RunNs: 4_000_000, Tid: 7, Cpu: 1, Preempted: 1, OtherTgid: 99, Woken: 1})
	}
	var s hintpage.Slot
	if err := f.FindTID(7, &s); err != nil {
		t.Fatal(err)
	}
	if s.State != hintpage.StateRunning || s.Contention != hintpage.ContShared || s.ExpectedSliceNs != 4_000_000 {
		t.Fatalf("slot %+v", s)
	}
	if s.SwitchInNs != now-8_000_000 || s.Remaining(s.PublishNs) != 0 {
		t.Fatalf("switch-in %d remaining %d: want the last switch-in, 8 ms ago, slice overdue", s.SwitchInNs, s.Remaining(s.PublishNs))
	}
	if len(p.Lag()) != 5 {
		t.Fatalf("lag samples %d", len(p.Lag()))
	}
	// A record the reader was not woken for (it came later) is published
	// but is not a publish delay.
	p.OnEvent(&bpf.SchedSwitchEvent{InNs: now, OffNs: 50_000, RunNs: 4_000_000, Tid: 7, Cpu: 1, Preempted: 1, OtherTgid: 99})
	if len(p.Lag()) != 5 || p.Quiet() != 1 {
		t.Fatalf("lag samples %d, quiet %d: want 5 and 1", len(p.Lag()), p.Quiet())
	}
	p.OnEvent(&bpf.SchedSwitchEvent{InNs: now, OffNs: 1, Tid: 99}) // unwatched: ignored
}

func TestDomainPageByVCPU(t *testing.T) {
	p := newPublisher(t)
	p.Apply(added(targets.KindDomain, "guest 1", 40, 41))
	path := filepath.Join(p.opts.Dir, "vgpu-probe-hints-guest_1")
	fi, err := os.Stat(path)
	if err != nil || fi.Size() != 1<<20 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("domain page: %v %v", fi, err)
	}
	f, _ := hintpage.Map(path)
	defer f.Close()
	if h := f.Header(); h.Slots != 2 || h.Flags&hintpage.FlagVCPU == 0 {
		t.Fatalf("header %+v", h)
	}
	if want := "<qemu:commandline><qemu:arg value='-object'/><qemu:arg value='memory-backend-file,id=vgpu-probe-hints,mem-path=/run/vgpu-probe/hints/vgpu-probe-hints-guest_1,size=1M,share=on'/><qemu:arg value='-device'/><qemu:arg value='{&quot;driver&quot;:&quot;ivshmem-plain&quot;,&quot;memdev&quot;:&quot;vgpu-probe-hints&quot;}'/></qemu:commandline>"; hintpage.LibvirtXML(DefaultDir, "guest 1") != want {
		t.Fatalf("xml %s", hintpage.LibvirtXML(DefaultDir, "guest 1"))
	}
}

// A VM's vCPU slot carries the slice its vCPU thread got, though the
// slot itself names no tid (the guest finds it by CPU).
func TestDomainPageCarriesMitigation(t *testing.T) {
	p, err := New(Options{Dir: t.TempDir(), Log: zerolog.Nop(),
		Owner:      func(int) (int, int, error) { return os.Getuid(), os.Getgid(), nil },
		Mitigation: func(tid int) time.Duration { return map[int]time.Duration{40: 100 * time.Microsecond}[tid] }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	p.Apply(added(targets.KindDomain, "guest 1", 40, 41))
	f, err := hintpage.Map(filepath.Join(p.opts.Dir, "vgpu-probe-hints-guest_1"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for vcpu, want := range []uint32{100_000, 0} {
		var s hintpage.Slot
		if err := f.ReadSlot(vcpu, &s); err != nil {
			t.Fatal(err)
		}
		if s.MitigationNs != want {
			t.Errorf("vCPU %d: mitigation %d ns, want %d", vcpu, s.MitigationNs, want)
		}
	}
}

func TestCheckDir(t *testing.T) {
	if err := CheckDir(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Fatal("missing dir accepted")
	}
	// /proc refuses new files even to root.
	if err := CheckDir("/proc"); err == nil {
		t.Fatal("/proc accepted as a hints directory")
	} else {
		t.Log(err)
	}
}

// fakeCounters serves counters per thread (Stats) and, with batch, all
// at once (AllStats), counting both.
type fakeCounters struct {
	st            map[uint32]bpf.SchedThreadStats
	lookups, alls int
}

func (f *fakeCounters) Stats(tid uint32, out *bpf.SchedThreadStats) error {
	f.lookups++
	st, ok := f.st[tid]
	if !ok {
		return errors.New("not watched")
	}
	*out = st
	return nil
}

type batchCounters struct{ *fakeCounters }

func (f batchCounters) AllStats(each func(uint32, *bpf.SchedThreadStats)) error {
	f.alls++
	for tid, st := range f.st {
		each(tid, &st)
	}
	return nil
}

// The refresh takes each slot's state from the counters: one lookup per
// thread for a few threads, one batch for many, and a thread the batch
// does not return (not watched yet) is still re-published, without a
// lookup.
func TestRefreshCounters(t *testing.T) {
	for _, n := range []int{batchFrom - 1, 2 * batchFrom} {
		f := &fakeCounters{st: map[uint32]bpf.SchedThreadStats{}}
		p := newPublisher(t)
		p.SetCounters(batchCounters{f})
		tids := []int{}
		now := monoNow()
		for i := range n {
			tid := 1000 + i
			tids = append(tids, tid)
			if i > 0 { // the first is not watched yet
				f.st[uint32(tid)] = bpf.SchedThreadStats{OnCpu: 0, SwitchInNs: now - 2000, SwitchOutNs: now - 1000, Cpu: 1}
			}
		}
		p.Apply(added(targets.KindPID, "9", tids...))
		f.lookups, f.alls = 0, 0
		p.refresh()
		if n >= batchFrom && (f.alls != 1 || f.lookups != 0) || n < batchFrom && (f.alls != 0 || f.lookups != n) {
			t.Errorf("%d threads: %d batches, %d lookups", n, f.alls, f.lookups)
		}
		pg, err := hintpage.Map(p.Path("9"))
		if err != nil {
			t.Fatal(err)
		}
		for i, tid := range tids {
			var s hintpage.Slot
			if err := pg.FindTID(tid, &s); err != nil {
				t.Fatalf("%d threads: tid %d: %v", n, tid, err)
			}
			if s.PublishNs < now {
				t.Errorf("%d threads: tid %d not re-published", n, tid)
			}
			if i > 0 && (s.State != hintpage.StateSleeping || s.SwitchOutNs != now-1000) {
				t.Errorf("%d threads: tid %d: state %d, switch-out %d: not from its counters", n, tid, s.State, s.SwitchOutNs)
			}
		}
		pg.Close()
	}
}

// A page that cannot be created (here: its directory went away) is logged,
// counted and retried, never a crash, for both kinds of page.
func TestPageCreationFailureCountedAndRetried(t *testing.T) {
	for _, kind := range []targets.Kind{targets.KindPID, targets.KindDomain} {
		t.Run(string(kind), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "hints")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			failed := 0
			p, err := New(Options{Dir: dir, Log: zerolog.Nop(), Failed: func() { failed++ },
				Owner: func(int) (int, int, error) { return os.Getuid(), os.Getgid(), nil }})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if err := os.Remove(dir); err != nil {
				t.Fatal(err)
			}
			ev := added(kind, "vm1", 100)
			p.Apply(ev)
			key := ev.Target.Key()
			if got := p.Failing(); failed != 1 || len(got) != 1 || got[0] != key {
				t.Fatalf("after a failed create: %d failures counted, failing %v; want 1 and [%s]", failed, got, key)
			}
			p.retryFailed()
			if failed != 2 {
				t.Fatalf("a failed retry counted %d failures in all, want 2", failed)
			}
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			p.retryFailed()
			if got := p.Failing(); len(got) != 0 || failed != 2 {
				t.Fatalf("after a retry that could succeed: failing %v, %d failures; want none and 2", got, failed)
			}
			r, err := hintpage.Map(p.Path("vm1"))
			if err != nil {
				t.Fatalf("the retried page: %v", err)
			}
			defer r.Close()
			var s hintpage.Slot
			if kind == targets.KindPID {
				if err := r.FindTID(100, &s); err != nil {
					t.Fatalf("the retried page lacks its thread: %v", err)
				}
			}
			// A target that goes while failing is not retried.
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			p.Apply(added(kind, "vm2", 200))
			p.Apply(targets.Event{Kind: targets.Removed, Target: targets.Target{Kind: kind, Name: "vm2"}})
			if got := p.Failing(); len(got) != 0 {
				t.Fatalf("a removed target is still retried: %v", got)
			}
		})
	}
}

// VM pages stop at MaxVMPages, each allocated in full: the one past it is
// a counted failure, and gets its page once another VM goes.
func TestVMPagesBounded(t *testing.T) {
	failed := 0
	p, err := New(Options{Dir: t.TempDir(), Log: zerolog.Nop(), Failed: func() { failed++ },
		Owner: func(int) (int, int, error) { return os.Getuid(), os.Getgid(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	for i := range MaxVMPages + 1 {
		p.Apply(added(targets.KindDomain, fmt.Sprintf("vm%d", i), 1000+i))
	}
	last := fmt.Sprintf("vm%d", MaxVMPages)
	if got := p.Failing(); failed != 1 || len(got) != 1 || !strings.HasSuffix(got[0], last) {
		t.Fatalf("failing %v after %d failures, want %s only", got, failed, last)
	}
	if _, err := os.Stat(p.Path(last)); err == nil {
		t.Fatalf("page for %s past the bound", last)
	}
	p.Apply(targets.Event{Kind: targets.Removed, Target: targets.Target{Kind: targets.KindDomain, Name: "vm0"}})
	p.retryFailed()
	if _, err := os.Stat(p.Path(last)); err != nil || len(p.Failing()) != 0 {
		t.Fatalf("no page for %s once a VM went: %v, failing %v", last, err, p.Failing())
	}
}

// The hints directory: the default is made root's and DirMode under any
// umask, its mode put back; a symlink, another user's directory, one
// others may write, or one under a parent another user may write is
// refused with one line, and nothing is made in it.
func TestOwnDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: another user's directory")
	}
	root := t.TempDir()
	own := filepath.Join(root, "own")
	if err := os.Mkdir(own, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := OwnDir(own); err != nil {
		t.Errorf("a root directory no one else may write: %v", err)
	}
	refused := map[string]func(p string) error{
		"symlink":        func(p string) error { return os.Symlink(own, p) },
		"others' write":  func(p string) error { return mkdirMode(p, 0o1777) },
		"another user's": func(p string) error { return errors.Join(os.Mkdir(p, 0o755), os.Chown(p, 65534, 65534)) },
		"under a tenant's": func(p string) error {
			return errors.Join(os.Mkdir(p, 0o755), os.Chown(p, 65534, 65534), os.Mkdir(filepath.Join(p, "hints"), 0o711))
		},
	}
	for name, make := range refused {
		p := filepath.Join(root, strings.ReplaceAll(name, " ", "_"))
		if err := make(p); err != nil {
			t.Fatal(err)
		}
		if name == "under a tenant's" {
			p = filepath.Join(p, "hints")
		}
		err := OwnDir(p)
		if err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want a one-line refusal", name, err)
		}
		if err := CheckDir(p); err == nil {
			t.Errorf("%s: CheckDir took it", name)
		}
	}
	if err := OwnDir("relative/dir"); err == nil {
		t.Error("a relative directory was taken")
	}
}

func mkdirMode(p string, mode os.FileMode) error {
	if err := os.Mkdir(p, 0o700); err != nil {
		return err
	}
	return os.Chmod(p, mode)
}

// The agent's own directory is made, under the unit's umask (0077), with
// DirMode and a parent every user may search (QEMU's user reaches its
// page through both), and a mode changed since is put back.
func TestOwnDirMakes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	old := unix.Umask(0o077)
	defer unix.Umask(old)
	dir := filepath.Join(t.TempDir(), "vgpu-probe", "hints")
	if err := ownDir(dir, true); err != nil {
		t.Fatal(err)
	}
	mode := func(p string) os.FileMode {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode()
	}
	if m := mode(dir); m != os.ModeDir|DirMode {
		t.Errorf("made %v, want %v", m, os.ModeDir|DirMode)
	}
	if m := mode(filepath.Dir(dir)); m.Perm()&0o011 != 0o011 {
		t.Errorf("parent %v: others cannot search it", m)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := ownDir(dir, true); err != nil || mode(dir) != os.ModeDir|DirMode {
		t.Errorf("after chmod 0777: %v %v, want %v", err, mode(dir), os.ModeDir|DirMode)
	}
}
