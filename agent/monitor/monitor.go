package monitor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/model"
	"github.com/vgpu-probe/vgpu-probe/agent/procstat"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/bpf"
)

// ErrUnknownTarget is returned for a target name nothing discovered.
var ErrUnknownTarget = errors.New("unknown target")

// Probe is what the monitor needs from the loaded BPF programs
// (*bpfload.Probe).
type Probe interface {
	Watch(tid uint32) error
	Unwatch(tid uint32) error
	Stats(tid uint32, out *bpf.SchedThreadStats) error
	Corunners() (map[uint32][]bpfload.Corunner, error)
	Drops() (uint64, error)
	ReadEvent(rec *ringbuf.Record, ev *bpf.SchedSwitchEvent) error
	// StopEvents makes ReadEvent return ringbuf.ErrClosed, leaving the
	// rest usable until the probe is closed.
	StopEvents() error
	Mode() string
	Attach() error
	Detach() error
}

var _ Probe = (*bpfload.Probe)(nil)

// Options configures a Monitor; zero fields take the defaults.
type Options struct {
	Log zerolog.Logger
	// SampleEvery is how often counters are sampled for the window.
	SampleEvery time.Duration
	// Window is the span distributions and rates are computed over.
	Window time.Duration
	// TimelineEvents bounds the switch events kept for timelines.
	TimelineEvents int
	// TraceEvery and TraceWindow: the programs are attached for
	// TraceWindow out of every TraceEvery and detached in between, where
	// they cost the host nothing. 0 for TraceEvery (the default), or a
	// window as long as the period, keeps them attached.
	TraceEvery, TraceWindow time.Duration
	// OnEvent, when set, sees every switch event as soon as it is read
	// (the hint publisher); it must not block. It is called on the
	// reader's own thread, before the event goes into the timeline.
	OnEvent func(*bpf.SchedSwitchEvent)
	// ReaderPriority is the SCHED_FIFO priority the event reader's thread
	// runs at while OnEvent is set: 0 means DefaultReaderPriority, a
	// negative value leaves it an ordinary thread. Without OnEvent the
	// reader is an ordinary goroutine.
	ReaderPriority int
}

// DefaultReaderPriority is the real-time priority of the event reader when
// OnEvent is set: the lowest, above every ordinary thread and below every
// real-time one (interrupt threads, migration, watchdogs).
const DefaultReaderPriority = 1

func (o *Options) defaults() {
	if o.SampleEvery <= 0 {
		o.SampleEvery = 10 * time.Second
	}
	if o.Window <= 0 {
		o.Window = time.Minute
	}
	if o.TimelineEvents <= 0 {
		o.TimelineEvents = 1 << 18 // 256k events, ~12 MiB
	}
}

type watch struct {
	refs    int
	vcpu    int
	tgid    uint32          // its process (0: unknown), for co-runner keys
	sinceNs uint64          // CLOCK_MONOTONIC when first watched
	start   *model.Counters // the kernel's counters then
	last    *model.Counters // the counters last read: all that is left once it exits
	lastNs  uint64          // when
	// goneNs is when the thread was found to have exited (0: it has not),
	// final its counters then (see Monitor.exited).
	goneNs uint64
	final  *model.Counters
}

type sample struct {
	monoNs uint64
	stats  map[uint32]*model.Counters
}

// Monitor is safe for concurrent use.
type Monitor struct {
	probe Probe
	opts  Options
	log   zerolog.Logger

	mu      sync.Mutex
	targets map[string]targets.Target // by Key(); guarded by mu
	watched map[uint32]*watch         // guarded by mu
	history []sample                  // oldest first; guarded by mu
	traced  traceLog                  // guarded by mu
	corun   attribution               // guarded by mu
	// gone are the targets that went within the window, by Key(); left
	// the threads that left a watched target within it (gone.go). Both
	// guarded by mu.
	gone map[string]gone[model.Target]
	left map[string][]gone[model.Thread]

	timeline *timeline
}

// New returns a monitor over a loaded probe.
func New(p Probe, opts Options) *Monitor {
	opts.defaults()
	return &Monitor{
		probe:    p,
		opts:     opts,
		log:      opts.Log,
		targets:  map[string]targets.Target{},
		watched:  map[uint32]*watch{},
		gone:     map[string]gone[model.Target]{},
		left:     map[string][]gone[model.Thread]{},
		timeline: newTimeline(opts.TimelineEvents),
	}
}

// Run samples counters and records switch events until ctx is done; the
// targets come from Apply. It stops the event reader (Probe.StopEvents)
// and waits for it before it returns, so that the probe can be closed then
// with no OnEvent still using it.
func (m *Monitor) Run(ctx context.Context) {
	var wg sync.WaitGroup
	readerDone := make(chan struct{})
	go func() { defer close(readerDone); m.readEvents() }()
	m.mu.Lock()
	m.traced.start(monoNow()) // Load attached the programs
	m.mu.Unlock()
	if e, w := m.opts.TraceEvery, m.opts.TraceWindow; e > 0 && w < e {
		wg.Go(func() { m.traceWindows(ctx, w, e) })
	}
	t := time.NewTicker(m.opts.SampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			// Once Run returns the caller closes the probe, whose maps
			// OnEvent may be reading (the publisher's Stats): the reader
			// stops first.
			if err := m.probe.StopEvents(); err != nil {
				m.log.Debug().Err(err).Msg("closing the ring buffer")
			}
			<-readerDone
			return
		case <-t.C:
			m.sample()
		}
	}
}

// traceWindows detaches the programs after each window and attaches them
// again at the start of the next period, until ctx is done.
func (m *Monitor) traceWindows(ctx context.Context, window, every time.Duration) {
	t := time.NewTimer(window)
	defer t.Stop()
	on := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		on = !on
		if err := m.setTracing(on); err != nil {
			// The programs stay as they were; the next period retries.
			m.log.Error().Err(err).Bool("attach", on).Msg("switching trace window")
			on = !on
		}
		if on {
			t.Reset(window)
		} else {
			t.Reset(every - window)
		}
	}
}

func (m *Monitor) setTracing(on bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := monoNow()
	if !on {
		m.traced.stop(now)
		return m.probe.Detach()
	}
	if err := m.probe.Attach(); err != nil {
		return err
	}
	m.traced.start(now)
	return nil
}

// Apply adds, updates or removes a target and watches or unwatches its
// threads accordingly. What goes stays in snapshots for a window (gone.go).
func (m *Monitor) Apply(ev targets.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := ev.Target.Key()
	old, had := m.targets[key]
	now := monoNow()
	switch ev.Kind {
	case targets.Added:
		if had {
			m.leave(key, old, ev.Target, now)
		}
		m.back(key, ev.Target)
		m.targets[key] = ev.Target
		m.timeline.setTarget(key, ev.Target.Name, tidsOf(ev.Target))
		for _, th := range ev.Target.Threads {
			m.ref(uint32(th.TID), th.VCPU)
		}
		if had {
			for _, th := range old.Threads {
				m.unref(uint32(th.TID))
			}
		}
		// A target's threads come and go all the time (a thread pool, a
		// shell's children): its first description is news, the rest are
		// debug, or a busy --pid target writes a line every re-scan.
		lvl := zerolog.InfoLevel
		if had {
			lvl = zerolog.DebugLevel
		}
		m.log.WithLevel(lvl).Str("target", key).Int("threads", len(ev.Target.Threads)).Bool("update", had).Msg("watching target")
	case targets.Removed:
		if !had {
			return // already found gone (reapProcesses)
		}
		v := m.lookAt(now, m.readThreads(old.Threads, now))
		m.remove(key, old, v, m.wentAt(old, now))
	}
}

// ref and unref must be called with mu held.
func (m *Monitor) ref(tid uint32, vcpu int) {
	if w, ok := m.watched[tid]; ok {
		w.refs++
		if vcpu >= 0 {
			w.vcpu = vcpu
		}
		return
	}
	k, err := procstat.Read(int(tid))
	if err != nil {
		// Exited between discovery and now.
		m.log.Debug().Err(err).Uint32("tid", tid).Msg("cannot read thread counters")
		return
	}
	if err := m.probe.Watch(tid); err != nil {
		// A full map: the rest still works.
		m.log.Warn().Err(err).Uint32("tid", tid).Msg("cannot watch thread")
		return
	}
	tgid, _ := tgidOf(int(tid)) // 0 if it just exited: it will not run again
	// The programs' counters start from zero with the watch.
	start := &model.Counters{Kernel: k}
	now := monoNow()
	m.watched[tid] = &watch{refs: 1, vcpu: vcpu, tgid: tgid, sinceNs: now, start: start, last: start, lastNs: now}
}

func (m *Monitor) unref(tid uint32) {
	w, ok := m.watched[tid]
	if !ok {
		return
	}
	if w.refs--; w.refs > 0 {
		return
	}
	delete(m.watched, tid)
	if err := m.probe.Unwatch(tid); err != nil {
		m.log.Warn().Err(err).Uint32("tid", tid).Msg("cannot unwatch thread")
	}
}

// TargetCount returns how many targets are known: watched, or gone within
// the window.
func (m *Monitor) TargetCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.targets) + len(m.gone)
}

// WaitTargets waits until at least n targets are known or ctx is done.
func (m *Monitor) WaitTargets(ctx context.Context, n int) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for m.TargetCount() < n {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d targets (have %d): %w", n, m.TargetCount(), ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// sample reads every watched thread's counters into the history and drops
// samples no longer needed for the window.
func (m *Monitor) sample() {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := monoNow()
	s := sample{monoNs: now, stats: m.readAll(now)}
	m.expire(now)
	m.history = append(m.history, s)
	// Keep the newest sample at least Window old as the window's base.
	cut := s.monoNs - uint64(min(m.opts.Window, time.Duration(s.monoNs)))
	i := 0
	for i+1 < len(m.history) && m.history[i+1].monoNs <= cut {
		i++
	}
	m.history = slices.Delete(m.history, 0, i)
	m.traced.trim(m.history[0].monoNs) // the oldest window start kept
}

// readAll reads every live watched thread (see read). Must be called with
// mu held.
func (m *Monitor) readAll(now uint64) map[uint32]*model.Counters {
	out := make(map[uint32]*model.Counters, len(m.watched))
	for tid, w := range m.watched {
		if c := m.read(tid, w, now); c != nil {
			out[tid] = c
		}
	}
	return out
}

func tracedOf(s *bpf.SchedThreadStats) model.Traced {
	return model.Traced{
		RunNs:          s.RunNs,
		OffCPUNs:       s.OffcpuNs,
		RunnableWaitNs: s.RqWaitNs,
		Switches:       s.Switches,
		Preemptions:    s.Preemptions,
		Wakeups:        s.Wakeups,
		Throttles:      s.Throttles,
		OnCPU:          s.OnCpu != 0,
		SwitchInNs:     s.SwitchInNs,
		SwitchOutNs:    s.SwitchOutNs,
		CPU:            int(s.Cpu),
		Run:            s.RunHist,
		Slice:          s.SliceHist,
		OffCPU:         s.OffcpuHist,
		Wake:           s.WakeHist,
		QuotaRun:       s.QuotaRunHist,
		ExitNs:         s.ExitNs,
		Exit: procstat.Counters{RunNs: s.ExitRunNs, RunDelayNs: s.ExitRunDelayNs, Timeslices: s.ExitTimeslices,
			Voluntary: s.ExitVoluntary, Involuntary: s.ExitInvoluntary},
	}
}

// Snapshot measures every target now, and includes those that went, and
// the threads that left a target, within the window (marked gone).
func (m *Monitor) Snapshot() model.Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := monoNow()
	v := m.lookAt(now, m.readAll(now))
	m.corun.forget(v.corunners, m.targets)
	m.reapProcesses(v)
	m.expire(now)
	snap := model.Snapshot{Time: time.Now().UTC(), AttachMode: m.probe.Mode(), Targets: []model.Target{},
		Tracing: m.traced.on, TracedTotalSeconds: m.traced.total(now).Seconds()}
	if d, err := m.probe.Drops(); err == nil {
		snap.EventDrops = d
	}
	var sp span
	for key, t := range m.targets {
		mt, s := m.measure(key, t, v)
		sp = sp.max(s)
		for _, g := range m.left[key] {
			mt.Threads = append(mt.Threads, g.m)
			sp = sp.max(g.span)
		}
		snap.Targets = append(snap.Targets, mt)
	}
	for _, g := range m.gone {
		snap.Targets = append(snap.Targets, g.m)
		sp = sp.max(g.span)
	}
	snap.WindowSeconds, snap.TracedSeconds = sp.window.Seconds(), sp.traced.Seconds()
	slices.SortFunc(snap.Targets, func(a, b model.Target) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})
	return snap
}

// measure measures a watched target's threads as v found them; the span
// is the longest window among them. Must be called with mu held.
func (m *Monitor) measure(key string, t targets.Target, v *look) (model.Target, span) {
	var (
		all []model.Corunner
		sp  span
	)
	self := m.targetTGIDs(t)
	q := model.Quota{PeriodUS: t.PeriodUS, QuotaUS: t.QuotaUS}
	mt := model.Target{Name: t.Name, Kind: string(t.Kind), PeriodUS: t.PeriodUS, QuotaUS: t.QuotaUS, Threads: []model.Thread{}}
	for _, th := range t.Threads {
		tid := uint32(th.TID)
		w := m.watched[tid]
		if w == nil {
			continue
		}
		mth, s, ok := m.measureThread(th, w, q, v)
		if !ok {
			continue
		}
		sp = sp.max(s)
		cs := m.corun.threadCorunners(v.corunners[tid], v.domains, self)
		all = append(all, cs...)
		mth.Corunners = cs[:min(len(cs), MaxCorunnerKeys)]
		mt.Threads = append(mt.Threads, mth)
	}
	mt.Corunners = m.corun.totals(key, all)
	return mt, sp
}

// measureThread analyses one watched thread: live, from its counters in
// v; exited, from its final counters, as of when it went. ok is false
// when there is nothing to analyse (it could not be read). Must be called
// with mu held.
func (m *Monitor) measureThread(th targets.Thread, w *watch, q model.Quota, v *look) (mth model.Thread, sp span, ok bool) {
	tid := uint32(th.TID)
	at, c := v.now, v.cur[tid]
	if w.goneNs != 0 {
		at, c = w.goneNs, w.final
	}
	if c == nil {
		return model.Thread{}, span{}, false
	}
	base, fromNs := m.base(tid, w)
	fromNs = min(fromNs, at)
	sp = span{window: time.Duration(at - fromNs), traced: m.traced.since(fromNs, at)}
	mth = model.Analyze(model.Input{
		TID: th.TID, VCPU: th.VCPU,
		Cur: c, Start: w.start, WindowStart: base,
		Watched: time.Duration(at - min(w.sinceNs, at)), Window: sp.window, NowNs: at,
		Tracing: m.traced.on && w.goneNs == 0,
		Quota:   q,
	})
	if w.goneNs != 0 {
		markGone(&mth, wallOf(w.goneNs))
	}
	return mth, sp, true
}

// base returns the counters at the start of the window for tid and when
// that was: the oldest kept sample that has the thread, or the counters
// when it was first watched.
func (m *Monitor) base(tid uint32, w *watch) (*model.Counters, uint64) {
	for _, s := range m.history {
		if c, ok := s.stats[tid]; ok && s.monoNs >= w.sinceNs {
			return c, s.monoNs
		}
	}
	return w.start, w.sinceNs
}

// monoNow is CLOCK_MONOTONIC, bpf_ktime_get_ns's clock.
func monoNow() uint64 { return bpfload.MonoNow() }

// readEvents copies switch events into the timeline until the probe is
// closed; a record that does not parse is skipped.
//
// With OnEvent set (the hint publisher: each switch-in of a watched
// thread must reach its page within microseconds) the reader runs on a
// thread of its own at a real-time priority, and calls OnEvent from that
// thread, so nothing stands between the kernel's wake-up and the page
// write; an ordinary thread would wait for a CPU like any other task,
// and on a loaded host bring the switch-in to the page milliseconds late
// at the p99 (docs/tried.md: "The hint reader as an ordinary thread"; at
// real-time priority: docs/BENCHMARKS.md, "Accuracy and visibility"). It
// is on whenever OnEvent is set because it costs no CPU time: the reader
// does the same work at either priority, only sooner, and it runs once
// per switch-in of a watched thread. What it changes is whom that work
// preempts: at any real-time priority it preempts an ordinary thread on
// its CPU at once, a watched one included; the BPF programs do not wake it again for the
// switch-in that ends such a short preemption (QUIET_OFF_NS in
// bpf/sched.bpf.c), and the publisher does not count its own process as
// a co-runner. Priority 1 keeps it below every real-time kernel thread.
func (m *Monitor) readEvents() {
	var place *placement
	if m.opts.OnEvent != nil && m.opts.ReaderPriority >= 0 {
		var done func()
		place, done = realtimeReader(m.opts.ReaderPriority, m.log)
		defer done()
	}
	var (
		rec ringbuf.Record
		ev  bpf.SchedSwitchEvent
	)
	for {
		err := m.probe.ReadEvent(&rec, &ev)
		if errors.Is(err, ringbuf.ErrClosed) {
			return
		}
		if err != nil {
			m.log.Debug().Err(err).Msg("skipping ring buffer record")
			continue
		}
		if m.opts.OnEvent != nil {
			m.opts.OnEvent(&ev)
			if place != nil {
				place.after(&ev)
			}
		}
		m.timeline.add(&ev)
	}
}

// tidsOf is a target's thread ids (never nil: nil is a target gone for
// timeline.setTarget).
func tidsOf(t targets.Target) []uint32 {
	out := make([]uint32, 0, len(t.Threads))
	for _, th := range t.Threads {
		out = append(out, uint32(th.TID))
	}
	return out
}
