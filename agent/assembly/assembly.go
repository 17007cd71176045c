package assembly

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/contention"
	"github.com/vgpu-probe/vgpu-probe/agent/hints"
	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/agent/monitor"
	"github.com/vgpu-probe/vgpu-probe/agent/runstate"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
)

// ErrRequest is wrapped by errors caused by what was asked (a hints
// directory that cannot be used) rather than by the work.
var ErrRequest = errors.New("bad request")

type requestError struct{ err error }

func (e *requestError) Error() string        { return e.err.Error() }
func (e *requestError) Unwrap() error        { return e.err }
func (e *requestError) Is(target error) bool { return target == ErrRequest }

// Options says which parts to run.
type Options struct {
	Log zerolog.Logger
	// Mitigation, when set, gives the threads of every target the slice
	// while it is watched (with GateMitigation, only while contended).
	Mitigation *mitigate.Config
	// GateMitigation gives a thread the slice only while another
	// process's task competes for its CPU, and its own back once it has
	// been free for contention.For: alone, the slice changes no wake-up
	// worth having and makes the program's own threads preempt each
	// other. It loads the eBPF programs and the monitor to measure that
	// (tracing all the time, as with Hints), and the publisher's pages
	// and the mitigator read one verdict per thread. The host agent
	// gates; an experiment that measures the slice itself does not.
	GateMitigation bool
	// Sched is mitigate.System unless a test plays another kernel.
	Sched mitigate.Sched
	// Hints is the page directory; "" publishes no pages.
	Hints string
	// Monitor runs the eBPF programs and the monitor even without hints
	// (the host agent measures; an experiment that only mitigates does
	// not need them). With Hints they always run.
	Monitor bool
	// MonitorOptions configure the monitor; OnEvent is the publisher's
	// (or, gating without hints, the contention tracker's) and
	// TraceEvery is 0 (every switch-in seen) with Hints or
	// GateMitigation.
	MonitorOptions monitor.Options
	// LoadProbe is bpfload.Load unless a test replaces it.
	LoadProbe func(bpfload.Options) (*bpfload.Probe, error)
	// StateDir keeps the locks and the slice journal
	// (agent/runstate): runstate.DefaultDir when "", none with NoState.
	// Start puts back the slices of agents that died there.
	StateDir string
	NoState  bool
	// ClaimProcesses are processes whose slices this agent must own
	// from the start (the agent's --pid targets): another live agent
	// owning one is an ErrRequest naming it. Only with Mitigation.
	ClaimProcesses []int
	// Claims are further named locks to hold (runstate.Acquire's name
	// and what), e.g. a libvirt URI whose domains are mitigated.
	Claims []Claim
	// MitigateFailed and HintsFailed are called for each thread whose
	// slice failed and each page that could not be created (the agent
	// counts them); nil: only logged.
	MitigateFailed, HintsFailed func()
}

// Claim is a named lock in the state directory.
type Claim struct{ Name, What string }

// Agent is the assembled parts. Apply and Follow feed it target changes;
// Close undoes everything it did.
type Agent struct {
	log   zerolog.Logger
	cont  *contention.Tracker
	mit   *mitigate.Mitigator
	pub   *hints.Publisher
	probe *bpfload.Probe
	mon   *monitor.Monitor

	ctx     context.Context
	cancel  context.CancelFunc
	follow  sync.WaitGroup // Follow's source readers
	gate    sync.WaitGroup // the mitigator's gate
	monDone chan struct{}
	locks   []*runstate.Lock
	once    sync.Once
	err     error
}

// Start builds the parts in order (mitigator, publisher, programs,
// monitor) and runs the monitor until ctx ends or Close. A part that
// fails undoes the ones before it.
func Start(ctx context.Context, o Options) (_ *Agent, err error) {
	if o.LoadProbe == nil {
		o.LoadProbe = bpfload.Load
	}
	a := &Agent{log: o.Log, monDone: make(chan struct{})}
	a.ctx, a.cancel = context.WithCancel(ctx)
	ctx = a.ctx
	defer func() {
		if err != nil {
			a.cancel()
			close(a.monDone)
			a.Close()
		}
	}()
	state := o.StateDir
	if state == "" {
		state = runstate.DefaultDir
	}
	if o.NoState {
		state = ""
	}
	if state != "" {
		// What agents that died left: their locks, and the slices they
		// set, put back by any start, whatever it is asked to do.
		runstate.Sweep(state)
		if n, err := mitigate.Recover(state, o.Sched, o.Log); n > 0 || err != nil {
			o.Log.Info().Err(err).Int("threads", n).Msg("mitigation: slices left by an agent that died put back")
		}
	}
	gated := o.Mitigation != nil && o.GateMitigation
	if gated || o.Hints != "" {
		// One verdict per thread, read by the pages and the gate.
		a.cont = contention.NewTracker(uint32(os.Getpid()))
	}
	if o.Mitigation != nil {
		mo := mitigate.Options{Slice: o.Mitigation.Slice, Log: o.Log, Sched: o.Sched,
			Failed: o.MitigateFailed, StateDir: state}
		if gated {
			mo.Contention = a.cont
		}
		a.mit, err = mitigate.New(mo)
		if err != nil {
			return nil, fmt.Errorf("--mitigate: %w", err)
		}
		for _, pid := range o.ClaimProcesses {
			if err := a.mit.Claim(pid); err != nil {
				return nil, claimError("--mitigate", err)
			}
		}
	}
	if state != "" {
		for _, c := range o.Claims {
			l, err := runstate.Acquire(state, c.Name, c.What)
			if err != nil {
				return nil, claimError("--mitigate", err)
			}
			a.locks = append(a.locks, l)
		}
	}
	if o.Hints != "" {
		if err := a.ownHints(state, o.Hints); err != nil {
			return nil, err
		}
		ho := hints.Options{Dir: o.Hints, Log: o.Log, Failed: o.HintsFailed, Contention: a.cont}
		if a.mit != nil {
			ho.Mitigation = a.mit.Slice
		}
		if a.pub, err = hints.New(ho); err != nil {
			return nil, &requestError{fmt.Errorf("--hints %s: %w", o.Hints, err)}
		}
	}
	if !o.Monitor && a.pub == nil && !gated {
		close(a.monDone)
		return a, nil
	}
	a.probe, err = o.LoadProbe(bpfload.Options{Events: true, WakeEveryEvent: a.pub != nil, Self: uint32(os.Getpid()), Log: o.Log})
	if err != nil {
		return nil, fmt.Errorf("loading eBPF programs: %w", err)
	}
	mo := o.MonitorOptions
	switch {
	case a.pub != nil:
		// The publisher feeds the tracker (hints.Options.Contention).
		mo.TraceEvery = 0 // every switch-in must be seen
		mo.OnEvent = a.pub.OnEvent
		a.pub.SetCounters(a.probe)
		go a.pub.Run(ctx)
	case gated:
		mo.TraceEvery = 0 // a co-runner's turn must be seen whenever it comes
		mo.OnEvent = a.cont.OnEvent
		if mo.ReaderPriority == 0 {
			// The gate reads the verdicts every GateEvery: the
			// records can wait for a CPU like any other task.
			mo.ReaderPriority = -1
		}
	}
	a.mon = monitor.New(a.probe, mo)
	go func() { defer close(a.monDone); a.mon.Run(ctx) }()
	if gated {
		a.gate.Go(func() { a.mit.Run(ctx) })
	}
	return a, nil
}

// claimError is a lock another agent holds as an ErrRequest (the user
// started two agents), any other failure as it is.
func claimError(flag string, err error) error {
	var held *runstate.HeldError
	if errors.As(err, &held) {
		return &requestError{fmt.Errorf("%s: %w", flag, err)}
	}
	return fmt.Errorf("%s: %w", flag, err)
}

// ownHints checks the hints directory is one only the agent writes
// (hints.CheckDir: nothing in it is another user's), takes its lock and
// removes what an earlier owner left there, but for the pages another
// process still uses (a running QEMU maps its VM's page: the publisher
// writes into it again in place).
func (a *Agent) ownHints(state, dir string) error {
	if err := hints.CheckDir(dir); err != nil {
		return &requestError{fmt.Errorf("--hints %s: %w", dir, err)}
	}
	if state == "" {
		return nil
	}
	name, err := runstate.DirLockName("hints", dir)
	if err != nil {
		return nil
	}
	l, err := runstate.Acquire(state, name, "hints directory "+dir)
	if err != nil {
		return claimError("--hints", err)
	}
	a.locks = append(a.locks, l)
	st, err := hints.RemoveStale(dir)
	if len(st.Removed) > 0 || err != nil {
		a.log.Info().Err(err).Strs("files", st.Removed).Str("dir", dir).Msg("hint pages: removed what an earlier agent left")
	}
	for name, why := range st.Kept {
		a.log.Info().Str("file", name).Str("why", why).Str("dir", dir).Msg("hint pages: kept a file found at start")
	}
	return nil
}

// Monitor is the running monitor (nil when neither Monitor nor Hints).
func (a *Agent) Monitor() *monitor.Monitor { return a.mon }

// Probe is the loaded programs (nil when neither Monitor nor Hints).
func (a *Agent) Probe() *bpfload.Probe { return a.probe }

// Publisher is the hint publisher (nil without Hints).
func (a *Agent) Publisher() *hints.Publisher { return a.pub }

// Contention is the threads' contention, which the pages and the
// mitigation's gate read (nil without Hints or a gated Mitigation).
func (a *Agent) Contention() *contention.Tracker { return a.cont }

// Mitigator is the mitigator (nil without Mitigation).
func (a *Agent) Mitigator() *mitigate.Mitigator { return a.mit }

// Slice is the slice tid has from the mitigation, 0 if none.
func (a *Agent) Slice(tid int) time.Duration {
	if a.mit == nil {
		return 0
	}
	return a.mit.Slice(tid)
}

// Apply passes one change of the targets to the parts, mitigator first.
func (a *Agent) Apply(ev targets.Event) {
	if a.mit != nil {
		a.mit.Apply(ev)
	}
	if a.pub != nil {
		a.pub.Apply(ev)
	}
	if a.mon != nil {
		a.mon.Apply(ev)
	}
}

// Follow applies every event of the sources until Close (or the ctx
// Start was given ends).
func (a *Agent) Follow(srcs ...targets.Source) {
	for _, s := range srcs {
		ch := s.Run(a.ctx)
		a.follow.Go(func() {
			for ev := range ch {
				a.Apply(ev)
			}
		})
	}
}

// Close stops the sources Follow reads and the monitor, restores every
// slice, removes every page and unloads the programs. It returns the
// failure to restore a slice, if any; later calls return the same.
func (a *Agent) Close() error {
	a.once.Do(func() {
		a.cancel()
		a.follow.Wait()
		<-a.monDone
		a.gate.Wait()
		if a.mit != nil {
			if err := a.mit.Stop(); err != nil {
				a.log.Error().Err(err).Msg("mitigation: restoring slices")
				a.err = err
			}
		}
		if a.pub != nil {
			a.pub.Close()
		}
		if a.probe != nil {
			a.probe.Close()
		}
		for _, l := range a.locks {
			l.Release()
		}
	})
	return a.err
}

// Applied is how many switch-in records the publisher applied.
func (a *Agent) Applied() int {
	if a.pub == nil {
		return 0
	}
	return a.pub.Applied()
}
