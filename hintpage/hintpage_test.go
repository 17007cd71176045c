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
	w, err := initWriter(b, n, flags)
	if err != nil {
		t.Fatal(err)
	}
	return w, b
}

// slotFor derives every field from k, so a reader can tell a slot mixed
// from two writes.
func slotFor(k uint64) Slot {
	s := Slot{
		TID: uint32(k%1000 + 1), SliceNs: 4_000_000 + k%1000, PublishNs: k*10 + 7,
		QuotaUS: uint32(k%100) + 1, PeriodUS: 100_000, Contention: uint8(k % 4),
		EstFlags: uint8(k % 4), TickNs: 4_000_000, TickPhaseNs: uint32(k % 4_000_000), QuotaRunNs: k % 5_000_000,
		MitigationNs: uint32(k%2) * 100_000,
		State:        uint8(k%3 + 1), LiveFlags: uint8(k % 2), CPU: uint16(k % 7),
		SwitchInNs: k * 10, SwitchOutNs: k*10 - 5, QuotaEndNs: k*10 + k%3_000_000,
	}
	s.ExpectedSliceNs = s.Expected()
	return s
}

// estimateOf and liveOf split a slot into its two blocks: each is
// written under its own seqlock, so a read may pair blocks of two writes.
func estimateOf(s Slot) Slot {
	return Slot{TID: s.TID, SliceNs: s.SliceNs, PublishNs: s.PublishNs, QuotaUS: s.QuotaUS, PeriodUS: s.PeriodUS,
		Contention: s.Contention, EstFlags: s.EstFlags, TickNs: s.TickNs, TickPhaseNs: s.TickPhaseNs, QuotaRunNs: s.QuotaRunNs,
		MitigationNs: s.MitigationNs}
}

func liveOf(s Slot) Slot {
	return Slot{State: s.State, LiveFlags: s.LiveFlags, CPU: s.CPU, SwitchInNs: s.SwitchInNs, SwitchOutNs: s.SwitchOutNs, QuotaEndNs: s.QuotaEndNs}
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
					if want := slotFor(s.SwitchInNs / 10); liveOf(s) != liveOf(want) {
						t.Errorf("torn live block accepted: %+v, want %+v", s, want)
						return
					}
					if want := slotFor((s.PublishNs - 7) / 10); estimateOf(s) != estimateOf(want) {
						t.Errorf("torn estimate block accepted: %+v, want %+v", s, want)
						return
					}
					if s.ExpectedSliceNs != s.Expected() {
						t.Errorf("expected slice %d not derived from the blocks read", s.ExpectedSliceNs)
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
		"version 1":       {func(b []byte) []byte { binary.LittleEndian.PutUint16(b[4:], 1); return b }, ErrVersion},
		"version 3":       {func(b []byte) []byte { binary.LittleEndian.PutUint16(b[4:], 3); return b }, ErrVersion},
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
		"contention":        func(s *Slot) { s.Contention = 4 },
		"estimate flags":    func(s *Slot) { s.EstFlags = 0x80 },
		"live flags":        func(s *Slot) { s.LiveFlags = 0x80 },
		"never published":   func(s *Slot) { s.PublishNs = 0 },
		"slice of a minute": func(s *Slot) { s.SliceNs = 60e9 },
		"quota run":         func(s *Slot) { s.QuotaRunNs = 60e9 },
		"quota no period":   func(s *Slot) { s.QuotaUS, s.PeriodUS = 5, 0 },
		"tick":              func(s *Slot) { s.TickNs = 1e9 },
		"phase":             func(s *Slot) { s.EstFlags |= EstTickPhase; s.TickPhaseNs = s.TickNs },
		"quota end before":  func(s *Slot) { s.QuotaEndNs = s.SwitchInNs - 1 },
		"quota end far":     func(s *Slot) { s.QuotaEndNs = s.SwitchInNs + 30e9 },
		"mitigation slice":  func(s *Slot) { s.MitigationNs = MaxMitigation + 1 },
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
	s.SwitchInNs = 1007 + 20e6 // the live block may be newer than the estimate, not newer than now
	if err := s.Check(1007+5e6, 10e6, 1e6); !errors.Is(err, ErrAbsurd) {
		t.Errorf("switch-in in the future: %v", err)
	}
}

// TestMitigationField: the mitigation slice round-trips in what was a
// reserved word, and a page written before it (the word 0) reads as not
// mitigated: nothing valid before is rejected.
func TestMitigationField(t *testing.T) {
	w, b := newPage(t, 1, 0)
	p, _ := Parse(b)
	s := slotFor(101)
	for _, ns := range []uint32{0, 100_000, MaxMitigation} {
		s.MitigationNs = ns
		w.Publish(0, &s)
		var got Slot
		if err := p.ReadSlot(0, &got); err != nil || got.MitigationNs != ns {
			t.Errorf("mitigation %d ns: read %d, %v", ns, got.MitigationNs, err)
		}
		if off := HeaderSize + offMitigation; ns != 0 && b[off] == 0 && b[off+1] == 0 && b[off+2] == 0 && b[off+3] == 0 {
			t.Errorf("mitigation %d ns not at offset %d", ns, offMitigation)
		}
	}
}

// TestExpected: how the reader combines the blocks.
func TestExpected(t *testing.T) {
	in := uint64(1_000_000_000)
	run := Slot{State: StateRunning, SwitchInNs: in, PublishNs: in}
	cases := []struct {
		name string
		edit func(*Slot)
		want uint64
	}{
		{"unknown", func(s *Slot) {}, 0},
		{"free", func(s *Slot) { s.Contention, s.SliceNs = ContFree, Infinite }, Infinite},
		{"shared", func(s *Slot) { s.Contention, s.SliceNs = ContShared, 4e6 }, 4e6},
		{"quota end", func(s *Slot) {
			s.Contention, s.EstFlags, s.QuotaEndNs = ContThrottled, EstQuotaBound, in+3e6
		}, 3e6},
		{"quota end on the tick", func(s *Slot) {
			s.Contention, s.EstFlags, s.QuotaEndNs = ContThrottled, EstQuotaBound|EstTickPhase, in+3e6
			s.TickNs, s.TickPhaseNs = 4e6, 100
		}, 4e6 + 100 - 0}, // in is a multiple of 4 ms: next tick at in+4ms+100ns
		{"quota run without kernel state", func(s *Slot) {
			s.Contention, s.EstFlags, s.QuotaRunNs = ContThrottled, EstQuotaBound, 7e6
		}, 7e6},
		{"shared and quota: the shorter", func(s *Slot) {
			s.Contention, s.SliceNs, s.EstFlags, s.QuotaEndNs = ContShared, 4e6, EstQuotaBound, in+2e6
		}, 2e6},
		{"throttled at once", func(s *Slot) {
			s.Contention, s.EstFlags, s.QuotaEndNs = ContThrottled, EstQuotaBound, in
		}, 1},
	}
	for _, c := range cases {
		s := run
		c.edit(&s)
		if got := s.Expected(); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
	s := run
	s.Contention, s.SliceNs = ContShared, 4e6
	s.ExpectedSliceNs = s.Expected()
	if r := s.Remaining(in + 1e6); r != 3e6 {
		t.Errorf("remaining %d, want 3e6", r)
	}
	if r := s.Remaining(in + 5e6); r != 0 {
		t.Errorf("overdue remaining %d", r)
	}
}

// TestVersion1Refused: a page in the first layout gives ErrVersion, so
// a reader falls back instead of misreading it.
func TestVersion1Refused(t *testing.T) {
	b := make([]byte, 4096)
	le := binary.LittleEndian
	le.PutUint32(b[0:], Magic)
	le.PutUint16(b[4:], 1)
	le.PutUint16(b[6:], 64)
	le.PutUint16(b[8:], 64)
	le.PutUint32(b[12:], 2)
	le.PutUint32(b[16:], ClockMonotonic)
	le.PutUint32(b[40:], 4096)
	if _, err := Parse(b); !errors.Is(err, ErrVersion) {
		t.Fatalf("v1 page: %v, want ErrVersion", err)
	}
}

// TestLiveBlockSeparate: the live block alone can be rewritten (as the
// BPF programs do) without touching the estimate block, and LiveSeq
// tells its writer where the seqlock stands.
func TestLiveBlockSeparate(t *testing.T) {
	w, b := newPage(t, 2, 0)
	p, _ := Parse(b)
	s := slotFor(5)
	w.Publish(1, &s)
	if w.LiveSeq(1) != 2 {
		t.Fatalf("live seq %d after one write", w.LiveSeq(1))
	}
	l := slotFor(9)
	w.PublishLive(1, &l)
	var got Slot
	if err := p.ReadSlot(1, &got); err != nil {
		t.Fatal(err)
	}
	if estimateOf(got) != estimateOf(s) || liveOf(got) != liveOf(l) {
		t.Fatalf("got %+v", got)
	}
	if LiveBodyOffset+LiveBodySize != offQuotaEnd+8 {
		t.Fatal("offsets")
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
	// QEMU's own file (owned by its user, made 0644 under its umask):
	// refused, as another user may hold it open; the same file made 0600
	// from the start (PrepareShared's) is used in place.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenShared(path, 2, FlagVCPU, 4242, 4242, 1<<20); !errors.Is(err, ErrForeign) {
		t.Fatalf("published into a file QEMU made 0644: %v", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
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

func TestNextTick(t *testing.T) {
	for _, c := range []struct{ t, phase, want uint64 }{
		{8_000_000, 20_000, 8_020_000},
		{8_020_000, 20_000, 8_020_000},
		{8_020_001, 20_000, 12_020_000},
		{11_999_999, 0, 12_000_000},
	} {
		if got := NextTick(c.t, 4_000_000, c.phase); got != c.want {
			t.Errorf("NextTick(%d, phase %d) = %d, want %d", c.t, c.phase, got, c.want)
		}
	}
	if got := NextTick(123, 0, 0); got != 123 {
		t.Errorf("no tick known: %d", got)
	}
}
