package hybridsync

import "github.com/vgpu-probe/vgpu-probe/hybridsync/signal"

// The engine's verdicts for a caller that executes them itself: the C
// library (libhybridsync), whose program threads cannot afford a call
// into Go per wait: a call from a C thread into Go wakes the Go runtime's
// threads, the more the longer the thread ran in C since its last call,
// while a call from Go into C costs tens of ns (docs/architecture.md, "One
// wait", has the figures). So
// every choice of how a wait goes is made here, in Go, and handed over as
// data that the caller keeps and applies to each wait with no call: a
// thread's Plan (the route of each kind of wait, epoch by epoch, and when
// the plan has run out), a kernel's delegation (Syncer.ShortWaits, and
// Delegation's bounds for when it ends), and, for a wait whose route is
// the policy, one call (SyncPending) in which the policy waits, driving
// the caller's query and blocking wait as its Event.

// Route is how the caller runs one wait that its plan gives it.
type Route int

const (
	// RouteDevice: the device's own synchronize, with the context's
	// schedule (CUDA's wait, as if the library were not there); no query
	// first: on finished work it is as quick as the query, and on
	// unfinished work the query is one driver call more. Counted as
	// delegated.
	RouteDevice Route = iota
	// RouteModel: RouteDevice for a wait whose kernel is unknown or
	// whose kernel's waits are delegated (ShortWaits said so, and no
	// wait since ended later than Delegation allows); else RoutePolicy.
	RouteModel
	// RoutePolicy: query; unfinished, Syncer.SyncPending (a context
	// wait, whose query covers one stream only: Syncer.Sync).
	RoutePolicy
	// RouteShadow: query; unfinished, block in the Event's blocking Wait
	// (a shadow event with the device's blocking schedule), not asking
	// the policy: the policy arm's event waits, which the device's
	// blocking schedule leaves spinning.
	RouteShadow
	routes
)

// Step is one epoch of a Plan.
type Step struct {
	// Blocking: the epoch runs with the context switched to the device's
	// blocking schedule (CUDA's blocking-sync mode); without it, with the
	// program's own.
	Blocking bool
	// Event: the route of event waits; Other: of stream and context
	// waits. Unswitched: the same where the switch to the blocking
	// schedule failed (a driver that cannot switch).
	Event, Other                     Route
	EventUnswitched, OtherUnswitched Route
}

// Plan is the answer to a thread's report, which the caller runs: its
// next epochs, back to back, each Len ns; it reports them together when
// the last one ends (a report is a call into Go, too costly per epoch on
// a contended CPU: armchooser.go's epochPlan says why).
type Plan struct {
	Steps [planMax]Step
	N     int
	Len   int64
	// MinWaits: a step that has made fewer waits when its time is up
	// goes on, Extend ns at a time, until MaxLen in all. 0: steps end on
	// time.
	MinWaits       uint64
	Extend, MaxLen int64
	// Quiet: while the thread's CPU is free, the caller may skip its
	// reports for up to this many ns as long as the thread's run delay
	// grows by under QuietFrac of the time, or by under QuietPerRun per
	// scheduling-in (0: that test is off), checked at the end of each
	// step: the plan holds while the evidence it was made on does. 0:
	// report when the last step ends.
	Quiet       int64
	QuietFrac   float64
	QuietPerRun int64
	// BlockCost: each wait's wall time beyond this counts into its
	// step's EpochDone.Blockable (the least that blocking in a wait
	// costs, in system calls and the wake-up after the work completes).
	BlockCost int64
}

// blockCost: a little under what CUDA's blocking-sync mode cost a program
// whose waits found the work all but done (about 13 µs a wait, the CuPy
// stencil of experiments/apps).
const blockCost = 10_000

// steps gives each arm's routes.
var steps = [arms]Step{
	// The model: learned-short waits to the device, the rest to the
	// policy, with the program's own schedule.
	ArmModel:  {Event: RouteModel, Other: RouteModel, EventUnswitched: RouteModel, OtherUnswitched: RouteModel},
	ArmDevice: {},
	// CUDA's blocking-sync mode, with event waits (which it leaves
	// spinning) blocking on shadow events; where the driver cannot
	// switch, the policy, which on a contended CPU blocks.
	ArmPolicy: {Blocking: true, Event: RouteShadow, Other: RouteDevice, EventUnswitched: RoutePolicy, OtherUnswitched: RoutePolicy},
	// CUDA's blocking-sync mode as CUDA runs it; where the driver cannot
	// switch, the policy's.
	ArmBlocking: {Blocking: true, Event: RouteDevice, Other: RouteDevice, EventUnswitched: RoutePolicy, OtherUnswitched: RoutePolicy},
}

// plan is e as the caller runs it.
func (e epochPlan) plan() Plan {
	p := Plan{N: e.N, Len: e.Len, MinWaits: e.MinWaits, Extend: e.Len / 4, MaxLen: e.MaxLen,
		Quiet: e.Quiet, QuietFrac: e.QuietFrac, QuietPerRun: e.QuietPerRun, BlockCost: blockCost}
	for i := range e.N {
		p.Steps[i] = steps[e.Arms[i]]
	}
	return p
}

// DevicePlan is the plan of a thread whose library is not configured (shut
// down meanwhile): every wait the device's own, for a second.
func DevicePlan() Plan { return Plan{N: 1, Len: 1_000_000_000, BlockCost: blockCost} }

// Engine makes the verdicts for a caller that executes them itself (the C
// library builds one beside its Syncer, libhybridsync/lib/main.go): the
// threads' plans, from the arm chooser over the Syncer's contention
// source, and the rules of the kernels' delegations.
type Engine struct {
	s       *Syncer
	chooser *armChooser
}

// NewEngine returns the engine over s, whose mode and contention source
// it follows.
func NewEngine(s *Syncer) *Engine { return &Engine{s: s, chooser: newArmChooser(s.cont)} }

// Report takes what thread tid measured of the epochs it last ran (done,
// in order; its first report has none), at now, with its run delay as
// read then (the contention signal reads no other for this decision), and
// returns its next plan.
func (e *Engine) Report(tid int, done []EpochDone, now int64, rd signal.RunDelay) Plan {
	if o, ok := e.s.cont.(signal.RunDelayObserver); ok && rd.OK {
		o.ObserveRunDelay(tid, now, rd)
	}
	if e.s.mode != ModeHybrid {
		return DevicePlan()
	}
	return e.chooser.Report(tid, done, now).plan()
}

// Contended says whether thread tid is in the arm chooser's contended
// regime, as of its last report (in the default mode, whose threads
// report): what OpenMP's live settings follow (hybridsync/openmp).
func (e *Engine) Contended(tid int) bool { return e.chooser.contended(tid) }

// Syncer is the primitive the engine decides for.
func (e *Engine) Syncer() *Syncer { return e.s }

// Outcomes is what the arm chooser did, for the stats' outcomes object;
// nil where it did nothing.
func (e *Engine) Outcomes() *ArmStats {
	if o := e.chooser.Stats(); o.Epochs[ArmModel.String()]+o.Explorations > 0 {
		return &o
	}
	return nil
}

// Delegation is what a caller that keeps kernels' delegations (the C
// library's table) needs to run them.
type Delegation struct {
	// On: the default mode, whose threads run plans and whose kernels'
	// waits may be delegated. Off, every wait takes RoutePolicy and
	// nothing is reported.
	On bool
	// Short: a delegated wait that completes later than this after its
	// kernel's launch ends the kernel's delegation (ShortWait)...
	Short int64
	// DoneAtStart: ...unless it returned within this of its start: it
	// found the work (all but) complete, which says nothing about the
	// kernel's timing (a delegated wait has no query first; an event
	// recorded long before its wait would otherwise end the delegation).
	DoneAtStart int64
}

// Delegation returns the rules of the delegations of e's Syncer.
func (e *Engine) Delegation() Delegation {
	return Delegation{On: e.s.mode == ModeHybrid, Short: ShortWait, DoneAtStart: doneAtStart}
}

const doneAtStart = 2000
