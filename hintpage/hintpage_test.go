package hintpage

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

func newPage(t testing.TB, n int, flags uint32) (*Writer, []byte) {
	t.Helper()
	words := make([]uint64, Size(n)/8)
	b := unsafeBytes(words)
	w, err := Init(b, n, flags)
	if err != nil {
		t.Fatal(err)
	}
	return w, b
}

// slotFor derives every field from k, so a reader can tell a slot mixed
// from two writes.
func slotFor(k uint64) Slot {
	return Slot{
		TID: uint32(k%1000 + 1), SwitchInNs: k * 10, SwitchOutNs: k*10 - 5,
		ExpectedSliceNs: 4_000_000, RemainingNs: k % 4_000_000, PublishNs: k*10 + 7,
		QuotaUS: uint32(k%100) + 1, PeriodUS: 100_000,
		State: uint8(k%3 + 1), Contention: uint8(k % 4), CPU: uint16(k % 7),
	}
}

func TestRoundTrip(t *testing.T) {
	w, b := newPage(t, 3, FlagVCPU)
	want := slotFor(12345)
	w.Publish(2, &want)
	p, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if h := p.Header(); h.Slots != 3 || h.Flags != FlagVCPU || h.Clock != ClockMonotonic || h.TotalSize != 4096 {
		t.Fatalf("header %+v", h)
	}
	var got Slot
	if err := p.ReadSlot(2, &got); err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if err := p.ReadSlot(0, &got); !errors.Is(err, ErrAbsurd) {
		t.Fatalf("never-written slot: %v, want ErrAbsurd", err)
	}
	if err := p.ReadSlot(3, &got); !errors.Is(err, ErrNoSlot) {
		t.Fatalf("slot 3 of 3: %v", err)
	}
	if p.Heartbeat() != want.PublishNs {
		t.Fatalf("heartbeat %d", p.Heartbeat())
	}
}

func TestFindTID(t *testing.T) {
	w, b := newPage(t, 4, 0)
	for i, tid := range []uint32{11, 12, 13} {
		s := slotFor(uint64(i))
		s.TID = tid
		w.Publish(i, &s)
	}
	p, _ := Parse(b)
	var s Slot
	if err := p.FindTID(13, &s); err != nil || s.TID != 13 {
		t.Fatalf("FindTID(13): %v %+v", err, s)
	}
	if err := p.FindTID(14, &s); !errors.Is(err, ErrNoSlot) {
		t.Fatalf("FindTID(14): %v", err)
	}
}

// TestConcurrentNoTornReads: one writer per slot rewrites it as fast as
// it can while readers read; every read accepted must be one whole write.
func TestConcurrentNoTornReads(t *testing.T) {
	const slots = 2
	w, b := newPage(t, slots, 0)
	p, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i := range slots {
		wg.Go(func() {
			for k := uint64(1); !stop.Load(); k++ {
				s := slotFor(k)
				w.Publish(i, &s)
				if k%4 == 0 {
					runtime.Gosched() // a real publisher writes once per context switch, not back to back
				}
			}
		})
	}
	var accepted, torn atomic.Int64
	var readers sync.WaitGroup
	for range 4 {
		readers.Go(func() {
			var s Slot
			for n := 0; n < 200_000; n++ {
				switch err := p.ReadSlot(n%slots, &s); {
				case errors.Is(err, ErrTorn):
					torn.Add(1)
				case err == nil:
					accepted.Add(1)
					if want := slotFor((s.SwitchInNs) / 10); s != want {
						t.Errorf("torn slot accepted: %+v, want %+v", s, want)
						return
					}
				case errors.Is(err, ErrAbsurd) && s.PublishNs == 0:
					// not yet written
				default:
					t.Errorf("read: %v", err)
					return
				}
			}
		})
	}
	readers.Wait()
	stop.Store(true)
	wg.Wait()
	t.Logf("accepted %d, torn (rejected) %d", accepted.Load(), torn.Load())
	if accepted.Load() == 0 {
		t.Fatal("no read accepted")
	}
}

func TestParseRejects(t *testing.T) {
	_, good := newPage(t, 2, 0)
	cases := map[string]struct {
		edit func(b []byte) []byte
		want error
	}{
		"empty":           {func(b []byte) []byte { return nil }, ErrSize},
		"magic":           {func(b []byte) []byte { b[0] ^= 1; return b }, ErrMagic},
		"version 2":       {func(b []byte) []byte { binary.LittleEndian.PutUint16(b[4:], 2); return b }, ErrVersion},
		"truncated":       {func(b []byte) []byte { return b[:100] }, ErrSize},
		"slot size":       {func(b []byte) []byte { binary.LittleEndian.PutUint16(b[8:], 32); return b }, ErrSize},
		"too many slots":  {func(b []byte) []byte { binary.LittleEndian.PutUint32(b[12:], 500); return b }, ErrSize},
		"total size lies": {func(b []byte) []byte { binary.LittleEndian.PutUint32(b[40:], 1<<20); return b }, ErrSize},
		"clock":           {func(b []byte) []byte { binary.LittleEndian.PutUint32(b[16:], 9); return b }, ErrVersion},
	}
	for name, c := range cases {
		b := c.edit(append([]byte(nil), good...))
		if _, err := Parse(b); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

func TestSlotChecks(t *testing.T) {
	w, b := newPage(t, 1, 0)
	p, _ := Parse(b)
	bad := map[string]func(*Slot){
		"state":             func(s *Slot) { s.State = 9 },
		"switch-in ahead":   func(s *Slot) { s.SwitchInNs = s.PublishNs + 1 },
		"slice of a minute": func(s *Slot) { s.ExpectedSliceNs = 60e9; s.RemainingNs = 1 },
		"remaining > slice": func(s *Slot) { s.RemainingNs = s.ExpectedSliceNs + 1 },
		"quota no period":   func(s *Slot) { s.QuotaUS, s.PeriodUS = 5, 0 },
	}
	for name, edit := range bad {
		s := slotFor(100)
		edit(&s)
		w.Publish(0, &s)
		var got Slot
		if err := p.ReadSlot(0, &got); !errors.Is(err, ErrAbsurd) {
			t.Errorf("%s: %v, want ErrAbsurd", name, err)
		}
	}
	s := slotFor(100) // PublishNs 1007
	if err := s.Check(1007+5e6, 10e6, 1e6); err != nil {
		t.Errorf("fresh: %v", err)
	}
	if err := s.Check(1007+50e6, 10e6, 1e6); !errors.Is(err, ErrStale) {
		t.Errorf("old: %v", err)
	}
	if err := s.Check(0, 10e6, 1e3); !errors.Is(err, ErrAbsurd) {
		t.Errorf("future: %v", err)
	}
}

func TestCreateFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "vgpu-probe-hints-a")
	w, err := Create(path, 2, 0, os.Getuid(), os.Getgid())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Remove()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() != 4096 {
		t.Fatalf("mode %v size %d, want 0600 and 4096", fi.Mode(), fi.Size())
	}
	s := slotFor(7)
	w.Publish(1, &s)
	f, err := Map(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got Slot
	if err := f.ReadSlot(1, &got); err != nil || got != s {
		t.Fatalf("read %v %+v", err, got)
	}
	if f.Replaced() {
		t.Fatal("replaced right after mapping")
	}
	w2, err := Create(path, 1, 0, os.Getuid(), os.Getgid())
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	if !f.Replaced() {
		t.Fatal("re-created page not seen as replaced")
	}
}

func TestMapTruncatedDoesNotCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p")
	w, err := Create(path, 2, 0, os.Getuid(), os.Getgid())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s := slotFor(3)
	w.Publish(1, &s)
	f, err := Map(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	var got Slot
	if err := f.ReadSlot(1, &got); !errors.Is(err, ErrFault) {
		t.Fatalf("read of a truncated mapping: %v, want ErrFault", err)
	}
	if _, err := Map(path); !errors.Is(err, ErrSize) {
		t.Fatalf("Map of an empty file: %v", err)
	}
}

func TestOpenSharedRefusesForeignFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to plant a file owned by another user")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "vgpu-probe-hints-vm")
	if err := os.WriteFile(path, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenShared(path, 1, FlagVCPU, 1000, 1000, 1<<20); err == nil {
		t.Fatal("published into a file owned by another user")
	}
	if err := os.Symlink(path, path+"-link"); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenShared(path+"-link", 1, FlagVCPU, 4242, 4242, 1<<20); !errors.Is(err, syscall.ELOOP) {
		t.Fatalf("followed a symlink: %v", err)
	}
	// QEMU's own file (owned by its user): used in place, made 0600.
	w, err := OpenShared(path, 2, FlagVCPU, 4242, 4242, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	fi, _ := os.Stat(path)
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o600 || st.Uid != 4242 || fi.Size() != 1<<20 {
		t.Fatalf("mode %v uid %d size %d", fi.Mode(), st.Uid, fi.Size())
	}
}
