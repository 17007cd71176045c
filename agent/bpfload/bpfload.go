//go:build linux

package bpfload

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/bpf"
)

var (
	// ErrRefused is wrapped when the kernel cannot run the programs: no
	// BPF support, no raw tracepoints, or the verifier rejected them.
	ErrRefused = errors.New("kernel refused the eBPF scheduler programs")
	// ErrPermission is wrapped when the process lacks the privileges to
	// load BPF programs (root, or CAP_BPF + CAP_PERFMON).
	ErrPermission = errors.New("not permitted to load eBPF programs (run as root)")
	// ErrNotWatched is returned by Stats for a thread that is not watched.
	ErrNotWatched = errors.New("thread not watched")
)

// Attach modes, reported by Probe.Mode.
const (
	ModeTPBTF = "tp_btf"
	ModeRawTP = "raw_tp"
)

// Options configures Load.
type Options struct {
	// Events turns on the switch-event ring buffer (timelines). Counters
	// and histograms are kept either way.
	Events bool
	// WakeEveryEvent wakes ReadEvent at the records of contended threads
	// without a live array that end an involuntary switch-out (at most
	// one per thread and millisecond) instead of once 256 KiB are queued:
	// the hint publisher must see those switch-ins within microseconds
	// (sched.bpf.c, emit).
	WakeEveryEvent bool
	// Self is the reader's process (the hint publisher's): its threads
	// preempting a watched thread do not make that thread contended, so
	// the reader's own wake-ups cannot keep themselves going. 0: none.
	Self uint32
	// ForceRawTP skips the tp_btf attempt (tests use it to exercise the
	// fallback on kernels that have tp_btf).
	ForceRawTP bool
	// DrainEvery is how often ReadEvent drains the ring buffer when the
	// kernel has not woken it (it only does so once 256 KiB are queued);
	// default 100ms. With WakeEveryEvent, while every watched thread has
	// a live array (no record asks for a wake-up), the reader sleeps this
	// long on a timer instead, less when records come fast enough to fill
	// 256 KiB sooner (wait.go).
	DrainEvery time.Duration
	Log        zerolog.Logger
}

// Probe is the loaded program set. Load attaches it; Detach and Attach
// take the programs off the tracepoints and put them back (a detached
// program costs the host nothing), keeping every map. Close detaches
// everything and frees the maps.
type Probe struct {
	maps   bpf.SchedMaps
	progs  []*ebpf.Program
	links  []link.Link
	attach func(i int, prog *ebpf.Program) (link.Link, error)
	// config is written whole into the config map at every change
	// (Attach's epoch, the hint registrations' generation: hints.go).
	configMu sync.Mutex
	config   bpf.SchedTraceConfig
	reader   *ringbuf.Reader
	mode     string
	drain    time.Duration

	// How the reader waits (wait.go): which watched threads may wake it,
	// and, for its timed sleeps, what it read since it last ran dry.
	wake      *wakeWatch
	timer     *time.Timer
	drained   int
	lastIdle  time.Time
	closed    chan struct{}
	closeOnce sync.Once
	closeMu   sync.Mutex

	// AllStats' buffers.
	batchMu   sync.Mutex
	batchKeys []uint32
	batchVals []bpf.SchedThreadStats

	// Live-block arrays (hints.go): the template of hint_maps' values.
	hintSpec *ebpf.MapSpec
	hintMu   sync.Mutex
	hintNext uint32
}

// The two program sets; LoadAndAssign loads only the programs named in the
// struct it is given, so the set the kernel cannot run is never loaded.
type rawPrograms struct {
	Switch    *ebpf.Program `ebpf:"raw_sched_switch"`
	Wakeup    *ebpf.Program `ebpf:"raw_sched_wakeup"`
	WakeupNew *ebpf.Program `ebpf:"raw_sched_wakeup_new"`
}

type btfPrograms struct {
	Switch    *ebpf.Program `ebpf:"btf_sched_switch"`
	Wakeup    *ebpf.Program `ebpf:"btf_sched_wakeup"`
	WakeupNew *ebpf.Program `ebpf:"btf_sched_wakeup_new"`
}

var tracepoints = [3]string{"sched_switch", "sched_wakeup", "sched_wakeup_new"}

// Load loads the programs, attaches them (tp_btf if the kernel supports BPF
// tracing programs, raw tracepoints otherwise) and opens the ring buffer.
func Load(opts Options) (*Probe, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, classify(fmt.Errorf("removing memlock rlimit: %w", err))
	}
	spec, err := bpf.LoadSched()
	if err != nil {
		return nil, fmt.Errorf("parsing embedded BPF object: %w", err)
	}

	p := &Probe{wake: newWakeWatch(), closed: make(chan struct{})}
	hintSpec := spec.Maps["hint_maps"].InnerMap
	if !opts.ForceRawTP {
		// The probe loads an fentry program, which some kernels refuse
		// (EPERM: locked-down 6.18 kernels) while they run tp_btf
		// programs, and tp_btf reads cost less than raw_tp's. Only a
		// kernel without tracing programs at all is not tried; any other
		// refusal falls back below.
		ferr := features.HaveProgramType(ebpf.Tracing)
		if errors.Is(ferr, ebpf.ErrNotSupported) {
			opts.Log.Debug().Err(ferr).Msg("BPF tracing programs unavailable; using raw tracepoints")
		} else if err := p.loadBTF(spec, opts); err != nil {
			opts.Log.Info().Err(err).Msg("tp_btf programs failed; falling back to raw tracepoints")
			p.Close()
			p = &Probe{wake: newWakeWatch(), closed: make(chan struct{})}
		}
	}
	if p.mode == "" {
		if err := p.loadRaw(spec, opts); err != nil {
			p.Close()
			return nil, classify(err)
		}
	}
	rd, err := ringbuf.NewReader(p.maps.Events)
	if err != nil {
		p.Close()
		return nil, classify(fmt.Errorf("opening ring buffer reader: %w", err))
	}
	p.reader = rd
	p.hintSpec = hintSpec
	p.drain = opts.DrainEvery
	if p.drain <= 0 {
		p.drain = 100 * time.Millisecond
	}
	// Due at once: the first ReadEvent decides how to wait (wait.go).
	p.lastIdle = time.Now()
	rd.SetDeadline(p.lastIdle)
	opts.Log.Debug().Str("mode", p.mode).Msg("scheduler programs attached")
	return p, nil
}

func (p *Probe) loadBTF(spec *ebpf.CollectionSpec, opts Options) error {
	var objs struct {
		bpf.SchedMaps
		btfPrograms
	}
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return fmt.Errorf("loading tp_btf programs: %w", err)
	}
	p.maps = objs.SchedMaps
	p.progs = []*ebpf.Program{objs.Switch, objs.Wakeup, objs.WakeupNew}
	p.attach = func(i int, prog *ebpf.Program) (link.Link, error) {
		l, err := link.AttachTracing(link.TracingOptions{Program: prog, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			return nil, fmt.Errorf("attaching tp_btf/%s: %w", tracepoints[i], err)
		}
		return l, nil
	}
	return p.attachAll(opts, ModeTPBTF)
}

func (p *Probe) loadRaw(spec *ebpf.CollectionSpec, opts Options) error {
	var objs struct {
		bpf.SchedMaps
		rawPrograms
	}
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return fmt.Errorf("loading raw_tp programs: %w", err)
	}
	p.maps = objs.SchedMaps
	p.progs = []*ebpf.Program{objs.Switch, objs.Wakeup, objs.WakeupNew}
	p.attach = func(i int, prog *ebpf.Program) (link.Link, error) {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: tracepoints[i], Program: prog})
		if err != nil {
			return nil, fmt.Errorf("attaching raw_tp/%s: %w", tracepoints[i], err)
		}
		return l, nil
	}
	return p.attachAll(opts, ModeRawTP)
}

// attachAll sets whether the programs emit events and attaches them the
// first time.
func (p *Probe) attachAll(opts Options, mode string) error {
	if opts.Events {
		p.config.Events = 1
	}
	if opts.WakeEveryEvent {
		p.config.Wakeup = 1
	}
	p.config.SelfTgid = opts.Self
	// The programs copy a thread's registration into its counters
	// under this generation; counters start at 0, so never 0 here.
	p.config.HintGen = 1
	if err := p.Attach(); err != nil {
		return err
	}
	p.mode = mode
	return nil
}

// Attach puts the programs on their tracepoints in a new epoch: the
// intervals each thread had open when they were detached are forgotten at
// its first event, so nothing is measured across the gap. Attaching
// attached programs does nothing. Not safe for concurrent use with Detach.
func (p *Probe) Attach() error {
	if len(p.links) > 0 {
		return nil
	}
	if err := p.updateConfig(func(c *bpf.SchedTraceConfig) { c.Epoch++ }); err != nil {
		return err
	}
	for i, prog := range p.progs {
		l, err := p.attach(i, prog)
		if err != nil {
			p.Detach()
			return err
		}
		p.links = append(p.links, l)
	}
	return nil
}

// updateConfig changes the trace config and writes it for the programs.
func (p *Probe) updateConfig(change func(*bpf.SchedTraceConfig)) error {
	p.configMu.Lock()
	defer p.configMu.Unlock()
	change(&p.config)
	if err := p.maps.Config.Update(uint32(0), &p.config, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("writing trace config: %w", err)
	}
	return nil
}

// Detach takes the programs off their tracepoints; the maps and what they
// hold stay.
func (p *Probe) Detach() error {
	var errs []error
	for _, l := range p.links {
		errs = append(errs, l.Close())
	}
	p.links = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("detaching programs: %w", err)
	}
	return nil
}

// classify wraps a load/attach error with the sentinel the caller needs to
// tell "run as root" from "this kernel cannot do it", keeping only the
// verifier's last line so the error stays one line.
func classify(err error) error {
	if errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("%w: %v", ErrPermission, oneLine(err))
	}
	return fmt.Errorf("%w: %v", ErrRefused, oneLine(err))
}

func oneLine(err error) string {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) && len(ve.Log) > 0 {
		// %v of a VerifierError is already its summary line.
		return strings.ReplaceAll(err.Error(), "\n", " ")
	}
	return strings.ReplaceAll(err.Error(), "\n", " ")
}

// Mode reports how the programs are attached: ModeTPBTF or ModeRawTP.
func (p *Probe) Mode() string { return p.mode }

// Watch starts measuring thread tid. Watching a watched thread keeps its
// counters. Watch and Unwatch must not run concurrently with each other
// (they read-modify-write a word of the watched bitmap).
func (p *Probe) Watch(tid uint32) error {
	var zero bpf.SchedThreadStats
	err := p.maps.Watched.Update(tid, &zero, ebpf.UpdateNoExist)
	if err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
		return fmt.Errorf("watching tid %d: %w", tid, err)
	}
	// The entry first, then the bit: the programs look the entry up only
	// once the bit is set.
	if err := p.setBit(tid, true); err != nil {
		return fmt.Errorf("watching tid %d: %w", tid, err)
	}
	p.wake.watch(tid, true)
	return nil
}

// watchWords is WATCH_WORDS in sched.bpf.c: tids beyond 64*watchWords have
// no bit and are always looked up.
const watchWords = 1 << 16

func (p *Probe) setBit(tid uint32, on bool) error {
	idx := tid >> 6
	if idx >= watchWords {
		return nil
	}
	var w uint64
	if err := p.maps.WatchedBits.Lookup(idx, &w); err != nil {
		return fmt.Errorf("reading watched bitmap: %w", err)
	}
	if on {
		w |= 1 << (tid & 63)
	} else {
		w &^= 1 << (tid & 63)
	}
	if err := p.maps.WatchedBits.Update(idx, w, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("writing watched bitmap: %w", err)
	}
	return nil
}

// Unwatch stops measuring tid and forgets its counters and co-runners.
func (p *Probe) Unwatch(tid uint32) error {
	if err := p.setBit(tid, false); err != nil {
		return fmt.Errorf("unwatching tid %d: %w", tid, err)
	}
	if err := p.maps.Watched.Delete(tid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("unwatching tid %d: %w", tid, err)
	}
	p.wake.watch(tid, false)
	if err := p.ClearHintSlot(tid); err != nil {
		return err
	}
	var (
		k    bpf.SchedCorunnerKey
		v    bpf.SchedCorunnerVal
		dead []bpf.SchedCorunnerKey
	)
	it := p.maps.Corunners.Iterate()
	for it.Next(&k, &v) {
		if k.Tid == tid {
			dead = append(dead, k)
		}
	}
	for _, k := range dead {
		_ = p.maps.Corunners.Delete(k) // LRU may have evicted it already
	}
	return nil
}

// Stats reads the counters of one watched thread.
func (p *Probe) Stats(tid uint32, out *bpf.SchedThreadStats) error {
	if err := p.maps.Watched.Lookup(tid, out); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("reading stats of tid %d: %w", tid, ErrNotWatched)
		}
		return fmt.Errorf("reading stats of tid %d: %w", tid, err)
	}
	return nil
}

// statsBatch is how many threads' counters AllStats reads per system
// call (5 KiB each).
const statsBatch = 32

// AllStats reads the counters of every watched thread, a batch of them
// per system call, and calls each with every one (st is reused after each
// returns). Kernels without batch lookups (before 5.6) return an error;
// read them one by one with Stats then.
func (p *Probe) AllStats(each func(tid uint32, st *bpf.SchedThreadStats)) error {
	p.batchMu.Lock()
	defer p.batchMu.Unlock()
	if p.batchKeys == nil {
		p.batchKeys = make([]uint32, statsBatch)
		p.batchVals = make([]bpf.SchedThreadStats, statsBatch)
	}
	var cur ebpf.MapBatchCursor
	for {
		n, err := p.maps.Watched.BatchLookup(&cur, p.batchKeys, p.batchVals, nil)
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("reading the counters of watched threads: %w", err)
		}
		for i := range n {
			each(p.batchKeys[i], &p.batchVals[i])
		}
		if err != nil { // ErrKeyNotExist: the last batch
			return nil
		}
	}
}

// Corunner is one task group that took the CPU from a watched thread.
type Corunner struct {
	TGID     uint32
	Comm     string
	Count    uint64 // involuntary switch-outs in its favour
	WaitedNs uint64 // runnable time of the watched thread that followed
}

// Corunners returns, per watched tid, who took its CPU.
func (p *Probe) Corunners() (map[uint32][]Corunner, error) {
	out := map[uint32][]Corunner{}
	var (
		k bpf.SchedCorunnerKey
		v bpf.SchedCorunnerVal
	)
	it := p.maps.Corunners.Iterate()
	for it.Next(&k, &v) {
		out[k.Tid] = append(out[k.Tid], Corunner{TGID: k.Tgid, Comm: cString(v.Comm[:]), Count: v.Count, WaitedNs: v.WaitedNs})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("iterating corunners: %w", err)
	}
	return out, nil
}

// Drops returns how many switch events were lost because the ring buffer
// was full, summed over CPUs.
func (p *Probe) Drops() (uint64, error) {
	var per []uint64
	if err := p.maps.Drops.Lookup(uint32(0), &per); err != nil {
		return 0, fmt.Errorf("reading drop counter: %w", err)
	}
	var n uint64
	for _, d := range per {
		n += d
	}
	return n, nil
}

// ReadEvent blocks until the next switch event and decodes it into ev. It
// returns an error wrapping ringbuf.ErrClosed once Close was called; a
// record of the wrong size returns ErrShortRecord and the caller should go
// on reading.
func (p *Probe) ReadEvent(rec *ringbuf.Record, ev *bpf.SchedSwitchEvent) error {
	for {
		err := p.reader.ReadInto(rec)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// Everything queued was read; wait until the next drain
			// (or a wake-up from the programs).
			if err := p.idle(); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("reading ring buffer: %w", err)
		}
		p.drained += len(rec.RawSample) + ringbufHeader
		return decodeEvent(rec.RawSample, ev)
	}
}

// StopEvents closes the switch-event ring buffer: a ReadEvent waiting
// returns, and every later one, with ringbuf.ErrClosed. The maps stay, so
// that whatever the reader calls after its last record can still use
// them until Close. Close does it too.
func (p *Probe) StopEvents() error {
	if p.closed != nil {
		p.closeOnce.Do(func() { close(p.closed) })
	}
	if p.reader == nil {
		return nil
	}
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	return p.reader.Close()
}

// Close detaches the programs and frees the maps; it interrupts ReadEvent.
// A reader that uses the maps between its reads (the hint publisher's
// Stats) must have stopped first: StopEvents, then wait for it
// (monitor.Monitor.Run does).
func (p *Probe) Close() error {
	errs := []error{p.StopEvents()}
	errs = append(errs, p.Detach())
	for _, prog := range p.progs {
		if prog != nil {
			errs = append(errs, prog.Close())
		}
	}
	p.progs = nil
	errs = append(errs, p.maps.Close())
	return errors.Join(errs...)
}

// cString converts a NUL-terminated C char array (as bpf2go types it).
func cString(b []int8) string {
	buf := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		buf = append(buf, byte(c))
	}
	return string(buf)
}

// ProgramStats sums the kernel's run-time accounting over the attached
// programs: total time spent in them and how often they ran. The kernel
// only counts while BPF stats are enabled (ebpf.EnableStats or the
// kernel.bpf_stats_enabled sysctl); otherwise both stay 0.
func (p *Probe) ProgramStats() (runtime time.Duration, runs uint64, err error) {
	for _, prog := range p.progs {
		st, err := prog.Stats()
		if err != nil {
			return 0, 0, fmt.Errorf("reading program stats: %w", err)
		}
		runtime += st.Runtime
		runs += st.RunCount
	}
	return runtime, runs, nil
}
