package hints

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/contention"
	"github.com/vgpu-probe/vgpu-probe/agent/procstat"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/bpf"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
)

// RefreshEvery is how often every slot is re-published from the BPF
// counters (switch-outs, threads that ran on without a switch) while the
// agent writes the live block of some thread (a vCPU, a thread whose
// process holds no live array): its switch-outs reach the page only
// through this refresh. Well within the readers' 250 ms freshness limit.
const RefreshEvery = 20 * time.Millisecond

// RefreshMappedEvery is the refresh period while the BPF programs write
// every thread's live block (all in live arrays): the refresh then only
// keeps the estimate blocks fresh (their publish time, and a contention
// that ages out after 500 ms), and the estimate's lessons come with the
// records. It is longer than RefreshEvery because that period's wake-ups
// would be much of the agent's CPU (docs/tried.md: "A 20 ms refresh while
// BPF writes every live block"), and it leaves 150 ms of the readers'
// limit for a late refresh.
const RefreshMappedEvery = 100 * time.Millisecond

// threadPageSlots: a local target's page holds at least this many thread
// slots (one 4 KiB page), so threads can come and go without a new file.
const threadPageSlots = (hintpage.PageAlign - hintpage.HeaderSize) / hintpage.SlotSize

// Counters is what the refresh reads from the BPF programs
// (*bpfload.Probe).
type Counters interface {
	Stats(tid uint32, out *bpf.SchedThreadStats) error
}

// batchFrom is how many slots a refresh needs before it reads the
// counters in a batch (allCounters) rather than one thread at a time: a
// batch reads the whole map, which costs about as much as ten single
// lookups.
const batchFrom = 12

// allCounters reads every watched thread's counters at once
// (*bpfload.Probe): a refresh then makes one system call, not one per
// thread.
type allCounters interface {
	AllStats(each func(tid uint32, st *bpf.SchedThreadStats)) error
}

// Options configures a Publisher.
type Options struct {
	Dir string
	Log zerolog.Logger
	// Counters refreshes the state of threads between switches; nil
	// publishes from events only.
	Counters Counters
	// Owner returns the uid and gid the page of a target whose thread is
	// tid must belong to; default: the thread's, from /proc.
	Owner func(tid int) (uid, gid int, err error)
	// Failed is called for every failed attempt to create a target's
	// page (the agent counts them); nil: only logged.
	Failed func()
	// Mitigation returns the EEVDF slice the agent's --mitigate gave
	// thread tid (0: none; *mitigate.Mitigator), published in its slot
	// so that its reader knows a blocking wake-up preempts at once; nil:
	// no thread is mitigated.
	Mitigation func(tid int) time.Duration
	// Contention is where the threads' contention is kept (shared with
	// the mitigator, which gates its slice on the same verdict); nil:
	// the publisher keeps its own. Either way OnEvent feeds it, and the
	// publisher adds and removes its threads there: nothing else may
	// feed it the same events.
	Contention *contention.Tracker
}

// RetryEvery is how often the page of a target that could not be
// created (its owner could not be read, the chown or the open was
// refused) is tried again while the target lasts.
const RetryEvery = 5 * time.Second

// Publisher keeps one page per target. Safe for concurrent use.
type Publisher struct {
	opts     Options
	self     uint32 // this process: its threads preempting a target are not co-runners
	tick     uint64 // the kernel's scheduler tick, ns (0: unknown)
	cont     *contention.Tracker
	counters atomic.Pointer[countersRef]
	arrays   atomic.Pointer[arraysRef] // nil: the agent writes every live block

	// Scratch counters, one thread at a time: the event path and the
	// refresh read them outside mu (a map lookup each), so that a
	// refresh over many threads never holds mu for long.
	evMu      sync.Mutex
	evStats   bpf.SchedThreadStats
	refMu     sync.Mutex
	refStats  bpf.SchedThreadStats
	refreshed []uint32
	refGen    uint64 // refreshes so far; guarded by refMu
	unbatched bool   // a batch read failed (said once); guarded by refMu

	mu      sync.Mutex
	pages   map[string]*page    // by target key
	files   map[string]string   // file name -> target key: never shared
	threads map[uint32]*thread  // by tid
	failed  map[string]*failure // targets without a page, by key: retried
	lag     lagLog
	quiet   int
	// kick tells Run that a thread's live block is the agent's again
	// (or a new thread's is), so that the refresh speeds up at once.
	kick chan struct{}

	mappedNow, served, refused int // LiveStats
	applied                    int // Applied

	// orphans are the files of dropped pages, removed by reap (outside
	// mu, in reapLoop: it may read every process's maps) unless another
	// process uses them; reapMu keeps one reap at a time; reapKick wakes
	// reapLoop.
	orphans  []pageFile
	reapMu   sync.Mutex
	reapKick chan struct{}
	proc     string // "/proc"
}

// failure is a target whose page could not be created.
type failure struct {
	target targets.Target
	msg    string // the latest error, logged when it changes
	n      int    // attempts that failed
}

type countersRef struct{ Counters }

type arraysRef struct{ LiveArrays }

type page struct {
	key, file     string
	vcpu          bool
	w             *hintpage.Writer
	quota, period uint32
	free          []int // unused thread slots
	threads       map[int]*thread
	uid, gid      int
	id            FileID    // the page file's identity
	live          *liveSock // thread pages with live arrays (live.go)
}

// New returns a publisher writing into opts.Dir, which must be writable.
func New(opts Options) (*Publisher, error) {
	if opts.Dir == "" {
		opts.Dir = DefaultDir
	}
	if err := CheckDir(opts.Dir); err != nil {
		return nil, err
	}
	if opts.Owner == nil {
		opts.Owner = procOwner
	}
	p := &Publisher{opts: opts, self: uint32(os.Getpid()), tick: kernelTickNs(), cont: opts.Contention,
		pages: map[string]*page{}, files: map[string]string{}, threads: map[uint32]*thread{},
		failed: map[string]*failure{}, kick: make(chan struct{}, 1), reapKick: make(chan struct{}, 1), proc: "/proc"}
	if p.cont == nil {
		p.cont = contention.NewTracker(p.self)
	}
	p.SetCounters(opts.Counters)
	return p, nil
}

// Path returns the page file of a target name in the publisher's
// directory.
func (p *Publisher) Path(target string) string {
	return filepath.Join(p.opts.Dir, hintpage.FileName(target))
}

// Apply creates, updates or removes the page of a target. The file of a
// page it drops is removed later, by Run's reaper (or Close): finding
// whether another process uses it may read every process's maps, which
// takes a tenth of a second for a process with 65,000 mappings, and the
// events of every other target must not wait for that.
func (p *Publisher) Apply(ev targets.Event) {
	p.apply(ev)
	p.kickReap()
}

// kickReap wakes the reaper. Never blocks: one pending kick is enough,
// as a reap takes every orphan there is when it starts.
func (p *Publisher) kickReap() {
	select {
	case p.reapKick <- struct{}{}:
	default:
	}
}

// reapLoop removes the files of dropped pages (reap) whenever Apply
// drops one, until ctx is done.
func (p *Publisher) reapLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.reapKick:
			p.reap()
		}
	}
}

func (p *Publisher) apply(ev targets.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	key := ev.Target.Key()
	pg := p.pages[key]
	if ev.Kind == targets.Removed {
		delete(p.failed, key)
		if pg != nil {
			p.drop(pg)
		}
		return
	}
	if pg != nil && !pg.fits(ev.Target) {
		p.drop(pg)
		pg = nil
	}
	if pg == nil {
		p.tryCreate(ev.Target)
		return
	}
	p.update(pg, ev.Target)
}

func (p *Publisher) update(pg *page, t targets.Target) {
	pg.quota, pg.period = clampU32(t.QuotaUS), clampU32(t.PeriodUS)
	p.assign(pg, t)
}

// tryCreate creates t's page and fills it, or logs and counts the failure
// and keeps t for retryFailed. A target with no threads yet waits for the
// event that brings them. Must be called with mu held.
func (p *Publisher) tryCreate(t targets.Target) {
	key := t.Key()
	if len(t.Threads) == 0 {
		delete(p.failed, key)
		return
	}
	pg, err := p.create(t)
	if err == nil {
		if f := p.failed[key]; f != nil {
			p.opts.Log.Info().Str("target", key).Int("failed_attempts", f.n).Msg("hint page created after all")
			delete(p.failed, key)
		}
		p.update(pg, t)
		return
	}
	f := p.failed[key]
	if f == nil {
		f = &failure{}
		p.failed[key] = f
	}
	f.target, f.n = t, f.n+1
	if msg := err.Error(); msg != f.msg {
		f.msg = msg
		p.opts.Log.Error().Err(err).Str("target", key).Dur("retry_every", RetryEvery).Msg("no hint page for this target")
	}
	if p.opts.Failed != nil {
		p.opts.Failed()
	}
}

// retryFailed tries again to create the pages that could not be.
func (p *Publisher) retryFailed() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.failed {
		p.tryCreate(f.target)
	}
}

// Failing returns the keys of the targets that have no page because
// creating it failed (retried every RetryEvery).
func (p *Publisher) Failing() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	keys := make([]string, 0, len(p.failed))
	for k := range p.failed {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func clampU32(v int64) uint32 { return uint32(max(0, min(v, 1<<31))) }

// fits: a domain page has a slot per vCPU index; a thread page has room.
func (pg *page) fits(t targets.Target) bool {
	if !pg.vcpu {
		return len(t.Threads) <= pg.w.Slots()
	}
	for _, th := range t.Threads {
		if th.VCPU >= pg.w.Slots() {
			return false
		}
	}
	return true
}

// create must be called with mu held, for a target with threads.
func (p *Publisher) create(t targets.Target) (*page, error) {
	file := hintpage.FileName(t.Name)
	if other, ok := p.files[file]; ok && other != t.Key() {
		return nil, fmt.Errorf("page file %s already belongs to %s", file, other)
	}
	uid, gid, err := p.opts.Owner(t.Threads[0].TID)
	if err != nil {
		return nil, fmt.Errorf("owner of %s: %w", t.Key(), err)
	}
	path := filepath.Join(p.opts.Dir, file)
	pg := &page{key: t.Key(), file: file, vcpu: t.Kind == targets.KindDomain, threads: map[int]*thread{}, uid: uid, gid: gid}
	if pg.vcpu && p.vmPages() >= MaxVMPages {
		return nil, fmt.Errorf("%d VM pages already, the most the agent's memory budget holds (%d MiB each)", MaxVMPages, hintpage.ShmemSizeMiB)
	}
	if pg.vcpu {
		n := 1
		for _, th := range t.Threads {
			n = max(n, th.VCPU+1)
		}
		pg.w, err = hintpage.OpenShared(path, n, hintpage.FlagVCPU, uid, gid, hintpage.ShmemSizeMiB<<20)
	} else {
		n := max(threadPageSlots, 2*len(t.Threads))
		pg.w, err = hintpage.Create(path, min(n, hintpage.MaxSlots), 0, uid, gid)
	}
	if err != nil {
		return nil, err
	}
	dev, ino := pg.w.DevIno()
	pg.id = FileID{Dev: dev, Ino: ino}
	if !pg.vcpu {
		for i := pg.w.Slots() - 1; i >= 0; i-- {
			pg.free = append(pg.free, i)
		}
	}
	p.pages[pg.key], p.files[file] = pg, pg.key
	l := p.opts.Log.Info().Str("target", pg.key).Str("page", path).Int("uid", uid).Int("slots", pg.w.Slots())
	if pg.vcpu {
		l = l.Str("qemu_args", strings.Join(hintpage.QEMUArgs(p.opts.Dir, t.Name), " "))
	}
	l.Msg("publishing hint page")
	p.startLive(pg)
	return pg, nil
}

// assign gives each of t's threads its slot and forgets threads that left.
func (p *Publisher) assign(pg *page, t targets.Target) {
	now := monoNow()
	seen := map[int]bool{}
	for _, th := range t.Threads {
		seen[th.TID] = true
		if _, ok := pg.threads[th.TID]; ok {
			continue
		}
		slot := th.VCPU
		if !pg.vcpu {
			if len(pg.free) == 0 {
				continue
			}
			slot, pg.free = pg.free[len(pg.free)-1], pg.free[:len(pg.free)-1]
		} else if slot < 0 {
			continue // not a vCPU thread
		}
		tt := &thread{tid: th.TID, hostTID: th.TID, slot: slot, page: pg}
		if pg.vcpu {
			tt.tid = 0 // vCPU slots are found by CPU, not tid
		}
		p.cont.Add(th.TID, pg.vcpu, now)
		pg.threads[th.TID], p.threads[uint32(th.TID)] = tt, tt
		p.publish(tt, now, true)
		p.mapIfServed(pg, tt)
		if !tt.mapped {
			p.kickRefresh()
		}
	}
	for tid, tt := range pg.threads {
		if !seen[tid] {
			p.forget(pg, tid, tt)
		}
	}
}

func (p *Publisher) forget(pg *page, tid int, tt *thread) {
	delete(pg.threads, tid)
	delete(p.threads, uint32(tid))
	p.cont.Remove(tid)
	p.unmap(tt)
	if !pg.vcpu {
		pg.w.Publish(tt.slot, &hintpage.Slot{}) // TID 0: no reader finds it
		pg.free = append(pg.free, tt.slot)
	}
}

// drop stops writing a page and leaves its file to reap, which removes
// it unless another process still uses it. Must be called with mu held.
// MaxVMPages bounds the VM pages one agent publishes. Each is QEMU's
// whole ivshmem region, allocated by the agent (so that a full /dev/shm
// is an error at creation, not a SIGBUS later) and so charged to the
// agent's memory cgroup: 128 of them are 128 MiB of the unit's
// MemoryMax=256M, which leaves the rest to the agent itself. A VM
// beyond the bound gets no page (logged, counted as a hints error,
// retried as VMs go).
const MaxVMPages = 128

// vmPages is the number of VM pages. Must be called with mu held.
func (p *Publisher) vmPages() int {
	n := 0
	for _, pg := range p.pages {
		if pg.vcpu {
			n++
		}
	}
	return n
}

func (p *Publisher) drop(pg *page) {
	for tid, tt := range pg.threads {
		p.forget(pg, tid, tt)
	}
	p.stopLive(pg)
	if err := pg.w.Close(); err != nil {
		p.opts.Log.Warn().Err(err).Str("target", pg.key).Msg("closing hint page")
	}
	if pg.id != (FileID{}) {
		p.orphans = append(p.orphans, pageFile{path: pg.w.Path(), id: pg.id})
	}
	delete(p.pages, pg.key)
	delete(p.files, pg.file)
}

// reap removes the files of dropped pages that no other process uses.
// One that a live process maps stays: a QEMU maps its VM's page as the
// guest's ivshmem memory, and a removed file would leave the guest a
// page nobody writes, which no later page could replace; the next agent
// (or this one, when the VM is watched again) writes into it in place.
// Must be called without mu.
func (p *Publisher) reap() {
	p.reapMu.Lock()
	defer p.reapMu.Unlock()
	p.mu.Lock()
	files := p.orphans
	p.orphans = nil
	p.mu.Unlock()
	if len(files) == 0 {
		return
	}
	why := users(p.proc, files)
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, f := range files {
		if _, again := p.files[filepath.Base(f.path)]; again {
			continue // a page of that name was made again, in place or anew
		}
		if why[i] != "" {
			p.opts.Log.Info().Str("page", f.path).Str("why", why[i]).Msg("hint page kept: another process uses it")
			continue
		}
		if err := removeSame(f.path, f.id); err != nil {
			p.opts.Log.Warn().Err(err).Str("page", f.path).Msg("removing hint page")
		}
	}
}

// publish must be called with mu held. The live block only where the BPF
// programs do not write it (into the page's live array); the estimate block when it changed, or with
// force (the refresh, whose publish time says the publisher is alive).
func (p *Publisher) publish(t *thread, now uint64, force bool) {
	c, _ := p.cont.Get(t.hostTID)
	s := t.render(now, env{quotaUS: t.page.quota, periodUS: t.page.period, tick: p.tick, mitigation: p.mitigation(t.hostTID), cont: c})
	if !t.mapped && now >= t.userAfter {
		t.page.w.PublishLive(t.slot, &s)
	}
	est := s
	est.PublishNs, est.ExpectedSliceNs = 0, 0
	est.State, est.CPU, est.SwitchInNs, est.SwitchOutNs, est.QuotaEndNs = 0, 0, 0, 0, 0
	if force || est != t.lastEst {
		t.lastEst = est
		t.page.w.PublishEstimate(t.slot, &s)
	}
}

// mitigation is the slice to publish for tid, within what a page holds.
func (p *Publisher) mitigation(tid int) uint32 {
	if p.opts.Mitigation == nil {
		return 0
	}
	return uint32(min(max(p.opts.Mitigation(tid), 0), hintpage.MaxMitigation))
}

func (p *Publisher) stats(tid uint32, st *bpf.SchedThreadStats) bool {
	c := p.counters.Load()
	return c != nil && c.Stats(tid, st) == nil
}

// OnEvent publishes the switch-in an event reports (monitor.Options.OnEvent),
// with, for a record that woke the reader, the thread's BPF counters as
// they are now (state, and the CPU bandwidth left at its latest switch-in).
// It feeds the contention tracker (Options.Contention) the interval the
// record ends first, and learns the slice from what the tracker made of it.
func (p *Publisher) OnEvent(ev *bpf.SchedSwitchEvent) {
	p.evMu.Lock()
	defer p.evMu.Unlock()
	// The counters (a map lookup, a system call) only for the records
	// that woke the reader: the others come in batches, up to one per
	// switch of a thread that has its CPU to itself, and the refresh
	// brings their slots up to date.
	st := &p.evStats
	ok := ev.Woken != 0 && p.stats(ev.Tid, st)
	cl := p.cont.Learn(ev)
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.threads[ev.Tid]
	if t == nil {
		return
	}
	p.applied++
	t.learn(ev.InNs, ev.OffNs, ev.RunNs, ev.Throttled != 0, cl, ev.Cpu, p.tick)
	if ok {
		t.observe(st, p.self)
	}
	now := monoNow()
	p.publish(t, now, false)
	if ev.Woken == 0 {
		// The reader was not woken for this one (it came with a later
		// record or the reader's drain): after a short interruption
		// the slot kept the thread running meanwhile, and a thread
		// with its CPU to itself has no slice to end.
		p.quiet++
	} else {
		p.lag.add(now - min(now, ev.InNs))
	}
}

// Run refreshes every slot each RefreshEvery (RefreshMappedEvery while
// every live block is in a live array) and removes the files of dropped
// pages (reapLoop) until ctx is done, then closes the pages (Close).
func (p *Publisher) Run(ctx context.Context) {
	var reaper sync.WaitGroup
	reaper.Go(func() { p.reapLoop(ctx) })
	defer reaper.Wait()
	period := p.refreshPeriod()
	tm := time.NewTimer(period)
	defer tm.Stop()
	retry := time.NewTicker(RetryEvery)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			p.Close()
			return
		case <-retry.C:
			p.retryFailed()
			continue // the refresh keeps its own time
		case <-p.kick:
			// A live block came back to the agent: the next refresh
			// is due within RefreshEvery, not a slow period away.
			if period == RefreshEvery {
				continue
			}
		case <-tm.C:
			p.refresh()
		}
		period = p.refreshPeriod()
		tm.Reset(period)
	}
}

// refreshPeriod is RefreshMappedEvery while the BPF programs write every
// thread's live block, else RefreshEvery.
func (p *Publisher) refreshPeriod() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mappedNow < len(p.threads) {
		return RefreshEvery
	}
	return RefreshMappedEvery
}

// kickRefresh wakes Run to re-time its refresh (a live block came back
// to the agent). Never blocks: one pending kick is enough.
func (p *Publisher) kickRefresh() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// refresh re-publishes every slot from the counters. It holds mu only
// per thread, not across the counter reads, so that the event path (the
// switch-ins) never waits for a whole refresh.
func (p *Publisher) refresh() {
	p.refMu.Lock()
	defer p.refMu.Unlock()
	p.refGen++
	gen := p.refGen
	// All watched threads' counters in one system call where the probe
	// can and there are enough threads for it to pay: a batch walks every
	// bucket of the 4096-entry hash (~4 µs), one lookup is ~0.5 µs. A
	// thread the batch did not return is not watched (yet): nothing to
	// look up.
	p.mu.Lock()
	many := len(p.threads) >= batchFrom
	p.mu.Unlock()
	batched := false
	if c := p.counters.Load(); c != nil && many {
		if all, ok := c.Counters.(allCounters); ok {
			err := all.AllStats(func(tid uint32, st *bpf.SchedThreadStats) {
				p.mu.Lock()
				if t := p.threads[tid]; t != nil {
					t.observe(st, p.self)
					p.publish(t, monoNow(), true)
					t.refreshed = gen
				}
				p.mu.Unlock()
			})
			if err != nil && !p.unbatched {
				p.unbatched = true
				p.opts.Log.Debug().Err(err).Msg("reading the counters one thread at a time")
			}
			batched = err == nil
		}
	}
	p.mu.Lock()
	tids := p.refreshed[:0]
	for tid, t := range p.threads {
		if t.refreshed != gen {
			tids = append(tids, tid)
		}
	}
	p.refreshed = tids
	p.mu.Unlock()
	st := &p.refStats
	for _, tid := range tids {
		ok := !batched && p.stats(tid, st)
		p.mu.Lock()
		if t := p.threads[tid]; t != nil {
			if ok {
				t.observe(st, p.self)
			}
			p.publish(t, monoNow(), true)
		}
		p.mu.Unlock()
	}
}

// Close stops writing every page and removes the files no other process
// uses (reap).
func (p *Publisher) Close() {
	p.mu.Lock()
	for _, pg := range p.pages {
		p.drop(pg)
	}
	p.mu.Unlock()
	p.reap()
}

// Applied returns how many switch-in records of page threads the
// publisher applied (woken for or batched; their live blocks may have
// been written by the BPF programs into a live array already).
func (p *Publisher) Applied() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.applied
}

// Lag returns the delays from switch-in (kernel time) to the page holding
// it, of the latest publishes (ns, oldest first): the switch-ins the
// reader is woken for (Quiet counts the others).
func (p *Publisher) Lag() []uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lag.samples()
}

// Quiet returns how many switch-ins the reader was not woken for: those
// that end an involuntary off-CPU interval shorter than 100 µs (often the
// reader itself, woken on the thread's CPU; the slot keeps the thread
// running), every switch-in of a thread with no longer involuntary
// interval in the last 500 ms (its CPU is its own: no slice ends), those
// after a voluntary switch-out (a sleep), and those within 1 ms of the
// thread's last one that woke it. They are read with a later record or
// the reader's periodic drain.
func (p *Publisher) Quiet() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.quiet
}

// lagLog keeps the latest switch-in-to-publish delays.
type lagLog struct {
	ring [4096]uint64
	n    int
}

func (l *lagLog) add(v uint64) { l.ring[l.n%len(l.ring)] = v; l.n++ }

func (l *lagLog) samples() []uint64 {
	if l.n <= len(l.ring) {
		return slices.Clone(l.ring[:l.n])
	}
	i := l.n % len(l.ring)
	return append(slices.Clone(l.ring[i:]), l.ring[:i]...)
}

func monoNow() uint64 { return bpfload.MonoNow() }

// procOwner reads the real uid and gid of a thread from /proc: QEMU's
// user for a vCPU thread, the target process's for a local one.
func procOwner(tid int) (int, int, error) {
	st, err := procstat.Status(tid)
	if err != nil {
		return 0, 0, err
	}
	return int(st.UIDs[0]), int(st.GIDs[0]), nil
}

// SetCounters sets where the refresh reads thread state (the loaded
// probe, which exists only after the targets' pages).
// If c also has LiveArrays (the loaded probe, on x86-64), local targets'
// live blocks go to per-target BPF arrays their processes map (live.go).
func (p *Publisher) SetCounters(c Counters) {
	if c == nil {
		p.counters.Store(nil)
		return
	}
	p.counters.Store(&countersRef{c})
	if a, ok := c.(LiveArrays); ok && p.arrays.Load() == nil {
		p.arrays.Store(&arraysRef{a})
		p.mu.Lock()
		for _, pg := range p.pages {
			p.startLive(pg)
		}
		p.mu.Unlock()
	}
}
