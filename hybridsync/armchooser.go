package hybridsync

import (
	"sync"
	"sync/atomic"

	"github.com/vgpu-probe/vgpu-probe/hybridsync/perthread"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
)

// Arm is how a thread's waits go during one epoch (the C library's default
// mode; armChooser chooses).
type Arm int

const (
	// ArmModel: the cost model, with waits learned to be short left to
	// the device's own wait. The arm of a CPU nobody else wants.
	ArmModel Arm = iota
	// ArmDevice: every unfinished wait to the device's own synchronize,
	// with the context's schedule: CUDA's default mode, as if the library
	// were not there.
	ArmDevice
	// ArmPolicy: every unfinished wait through the policy, none left to
	// the device; on a shared CPU the policy blocks at once, as CUDA's
	// blocking-sync mode does, event waits included (which that mode
	// leaves spinning).
	ArmPolicy
	// ArmBlocking: CUDA's blocking-sync mode as CUDA runs it: stream and
	// context waits block, event waits spin. Where a thread's event
	// waits are short, their spin costs less than a wake-up.
	ArmBlocking
	arms
)

func (a Arm) String() string {
	switch a {
	case ArmDevice:
		return "device"
	case ArmPolicy:
		return "policy"
	case ArmBlocking:
		return "blocking"
	}
	return "model"
}

// epochPlan is the answer to a thread's report: its next epochs, which the
// caller runs back to back and reports together when the last one ends.
// A report crosses from C into Go, which wakes the Go runtime's threads on
// the program's CPU; on a contended CPU they wait behind the co-runner, so
// a report costs the calling thread about a millisecond of wall time, too
// much to pay per epoch (docs/BENCHMARKS.md, "What the library's parts
// cost"). So an exploration's four epochs are one
// report, and so is the run of epochs of the arm it chose.
type epochPlan struct {
	// Arms[:N]: the arm of each epoch, in order. Each lasts Len ns.
	Arms [planMax]Arm
	N    int
	Len  int64
	// MinWaits: an epoch that has made fewer waits when its time is up
	// goes on, Len/4 at a time, until MaxLen in all: a rate from a
	// handful of waits is noise. 0: epochs end on time.
	MinWaits uint64
	MaxLen   int64
	// Quiet: while the thread's CPU is free, the caller may skip its
	// reports for up to this many ns as long as the thread's run delay
	// (schedstat) grows by under QuietFrac of the time, or by under
	// QuietPerRun per scheduling-in (0: that test is off): SchedSignal's
	// own rule (schedWindow.shared's thresholds), so a window the caller
	// lets pass is one the signal would call free, and every report it
	// makes is one the signal may judge otherwise. Throttling and steal,
	// which only the signal reads, wait for the report at the latest
	// freeQuiet on. 0: report at the end of the last epoch.
	Quiet, QuietPerRun int64
	QuietFrac          float64
}

// planMax is the most epochs one answer plans.
const planMax = 4

// EpochDone is what the caller measured of one epoch it ran.
type EpochDone struct {
	Waits     uint64 // waits made in it, complete or not
	Wall, CPU int64  // its length, and the thread's CPU time in it (ns)
	// Blockable: how long its waits lasted beyond the least that
	// blocking in one costs (Plan.BlockCost), summed:
	// the most that blocking in them could give back (ns).
	Blockable int64
	// EventWaits: of Waits, those on an event (the only waits the policy
	// and blocking arms take differently).
	EventWaits uint64
}

// armChooser picks, per thread, the arm that takes its waits, and checks
// the choice against what it costs, so that a wrong model cannot keep
// losing.
//
// Where the thread's CPU is free (ContentionSource), nothing is explored:
// no co-runner gains from a block. The thread stays in ArmModel, which
// spins like CUDA's default and so costs nothing alone, or in ArmDevice
// where its waits are too short for blocking to pay (free). It leaves the
// contended regime only after RegimeExit of free verdicts, because a
// blocked thread shows contention only when it wakes.
//
// Where the CPU is contended (shared or throttled), no model has been
// reliable: which of CUDA's modes wins depends on the machine and on the
// program's host work between waits (docs/tried.md). So the waits alternate between ArmDevice
// and ArmPolicy, which stand for CUDA's two modes, in epochs scored by
// what the program achieved: waits completed per second of wall time
// (every wait counts; a program's loop makes the same waits under either
// arm) and the thread's CPU per wait. Every contended thread explores,
// however short its waits: a thread that sleeps often is favoured by the
// scheduler in its host work too, which only the wall-time rate sees. An
// exploration runs four short epochs, ABBA then BAAB next time (a trend
// in the load favours neither arm), and the better arm, by the rates
// smoothed over explorations, then runs for a number of epochs that grows
// with the gap and doubles with each exploration that agrees (streak, up
// to maxExploit), keeping the worse arm's share of the time under 1%
// (2*gap/(4+exploitPerGap*gap)). Within tieGap the arm with less CPU per
// wait wins. The contention verdict is taken at each report: after an
// exploration, and after the chosen arm's run (epochPlan).
//
// A wrong choice of the policy arm costs more than a wrong choice of the
// device arm (blocking can be much slower than CUDA's default), and one
// exploration can misjudge a small gap, so on a gap under confirmGap
// the policy arm is taken only when the exploration before also favoured
// it; until then the device arm runs deferRun epochs. Not under a CPU
// quota, where each arm's first period inherits what the other left of
// the quota and the comparison already leans to the device arm. Where the
// hint page says the agent gave the thread a short EEVDF slice
// (signal.MitigationSource), a blocked waiter's wake-up preempts the co-runner at
// once, so the policy arm needs no confirmation and wins ties.
//
// The policy arm blocks in event waits too, where CUDA's blocking-sync
// mode spins; which is better depends on how long they last against a
// wake-up beside the co-runner (GROMACS waits milliseconds on its events,
// mixed_static 140 µs). So for a thread that waits on events, the
// exploration after each one that chose the policy compares the policy
// arm with ArmBlocking instead of with the device arm (the first time at
// once, not after the policy's run), and the winner (within waysTieGap,
// the one with less CPU per wait) stands for the policy from then on, in
// the explorations against the device arm too.
//
// The zero value is not usable; Syncers make theirs.
type armChooser struct {
	cont    signal.ContentionSource
	quiet   int64                            // epochPlan.Quiet in the free regime
	quota   interface{ QuotaPeriod() int64 } // nil: epochs are not fitted to a quota
	mitig   signal.MitigationSource          // nil: no thread is known to be mitigated
	team    signal.TeamSource                // nil: no thread is known to have a team
	threads perthread.Slots[armThread]

	epochs       [arms]atomic.Uint64
	epochNs      [arms]atomic.Int64
	explorations atomic.Uint64
	chosen       [arms]atomic.Uint64
	settled      atomic.Uint64
	deferred     atomic.Uint64
	mitigatedX   atomic.Uint64 // ArmStats.Mitigated
	teamX        atomic.Uint64 // ArmStats.Team
	// exploreWaits, exploreNs: waits and wall time of exploring epochs,
	// per arm (ArmStats.Rates).
	exploreWaits [arms]atomic.Uint64
	exploreNs    [arms]atomic.Int64
	// blockableNs, outsideNs: EpochDone.Blockable and Wall summed over
	// the epochs outside the policy arm.
	blockableNs, outsideNs atomic.Int64
}

const (
	// epochLen: long against the scheduler's slices (a fair share under
	// a co-runner moves in 3 ms slices, so an epoch's progress is known
	// to about 6%), short against a program's run. Exploring epochs are
	// half as long: two of them per arm, ABBA, still average out the
	// slices, and the time spent in the worse arm halves, which matters
	// most to a short run whose arms are far apart.
	epochLen   = 50_000_000
	exploreLen = 25_000_000
	// minEpochWaits: an exploring epoch with fewer waits is extended,
	// up to maxEpoch (epochPlan.MinWaits).
	minEpochWaits = 8
	maxEpoch      = 500_000_000
	// exitCheck: epochs of the chosen arm per report while the CPU looks
	// free again (RegimeExit is then checked that often).
	exitCheck = 8
	// RegimeExit: free verdicts needed, in a row, to leave the contended
	// regime.
	RegimeExit = 2_000_000_000
	// tieGap: rates closer than this are a tie, broken by CPU per wait.
	// waysTieGap: the same between the policy's two ways, which differ
	// by a few percent where they differ at all: narrower, so that the
	// way with less CPU per wait does not keep a slower program.
	tieGap     = 0.03
	waysTieGap = 0.01
	// exploreShare: below this share of the thread's time blockable
	// (outside the policy arm), a thread whose CPU is free runs the
	// device arm rather than the model (free).
	exploreShare = 0.03
	// confirmGap: a gap in the policy arm's favour under this is taken
	// only when a second exploration in a row finds it.
	confirmGap = 0.2
	deferRun   = 2
	// freeReport: how often a thread whose CPU is free looks for
	// contention (and so how soon it notices). A report is a call from C
	// into Go, which wakes the Go runtime's threads on the program's CPU
	// (libhybridsync/lib/wait.c), so not every few ms; and while the
	// thread's run delay stays flat the C side checks it alone
	// (epochPlan.Quiet), calling Go at least every freeQuiet, since a report
	// every freeReport cost a program measurably even on a free CPU
	// (docs/tried.md: "Reports into Go every 20 ms on a free CPU"). freeQuiet bounds how
	// late contention that shows only in steal time (a VM's) is noticed.
	freeReport = 20_000_000
	freeQuiet  = 250_000_000
	// exploitPerGap, minExploit, maxExploit: epochs of the better arm
	// after an exploration: exploitPerGap times the relative gap, within
	// bounds, doubled for each exploration in a row that agreed with the
	// arm chosen (armThread.streak), up to maxExploit. The cap bounds
	// how long a change of the better arm goes unseen (3.2 s).
	exploitPerGap = 200
	minExploit    = 8
	maxExploit    = 64
	// teamHold: how long a team seen spinning keeps the thread in the
	// device arm without a fresh sighting. A team's threads spin or not
	// by their runtime's setting, which outlasts a window; a window in
	// which they happened to sleep more (a serial phase of the program
	// longer than their spin) must not start an exploration that puts
	// them out of step.
	teamHold = 2_000_000_000
	// teamMaxRun: the longest run of the device arm beside a team
	// between two looks (ns).
	teamMaxRun = 12_800_000_000
)

// explore is the exploration's order of its pair of arms (armThread.pair);
// order 1 swaps them.
var explore = [4]int{0, 1, 1, 0}

// armThread is one thread's state. The owner thread alone reports, except
// in the overflow slot: mu keeps that one consistent.
type armThread struct {
	mu        sync.Mutex
	started   bool
	regime    bool
	freeSince int64
	// plan: the epochs the thread was last told to run (their arms).
	plan []Arm
	// exploring: plan is an exploration; order: its order of arms;
	// mitigated: the thread had the agent's short slice when it began;
	// pair: the two arms it compares.
	exploring, mitigated bool
	order                int
	pair                 [2]Arm
	// policy: the arm that stands for the policy (ArmPolicy, or
	// ArmBlocking where that won); events: event waits per epoch, each
	// epoch's weight halving with every newer one.
	policy Arm
	events float64
	// this exploration's sums, and the smoothed outcomes, per arm.
	waits, wall, cpu [arms]float64
	rate, cpuPer     [arms]float64
	// best: the arm chosen, for left more epochs; gap: the rates' gap
	// the last exploration against the device arm found.
	best Arm
	left int
	gap  float64
	// policyWon: the last exploration, on its own, favoured the policy.
	policyWon bool
	// teamUntil: the thread runs the device arm until then, a team of
	// other threads having been seen spinning (armChooser.teamed);
	// teamRuns: its runs since the team was first seen.
	teamUntil int64
	teamRuns  int
	// streak: explorations in a row that agreed with the arm chosen
	// (each doubles the run of it); decided: one was chosen before.
	streak  int
	decided bool
	// blockableNs, wallNs: EpochDone.Blockable and Wall over the epochs
	// outside the policy arm, each epoch's weight halving with every
	// newer one (wallNs 0: none yet).
	blockableNs, wallNs float64
}

func newArmChooser(cont signal.ContentionSource) *armChooser {
	o := &armChooser{cont: cont}
	// Only a verdict drawn from the thread's run delay can be checked
	// without Go (the hint page's and a fixed one cannot).
	if _, ok := cont.(*signal.SchedSignal); ok {
		o.quiet = freeQuiet
	}
	o.quota, _ = cont.(interface{ QuotaPeriod() int64 })
	o.mitig, _ = cont.(signal.MitigationSource)
	o.team, _ = cont.(signal.TeamSource)
	return o
}

// Report takes what thread tid measured of the epochs it was last told to
// run (done, in order; its first report has none), at now, and returns
// its next epochs.
func (o *armChooser) Report(tid int, done []EpochDone, now int64) epochPlan {
	t := o.threads.Get(tid)
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.started {
		t.started, t.policy = true, ArmPolicy
		return o.run(t, epochPlan{Len: signal.SamplePeriod}, ArmModel)
	}
	t.track(o.cont.Contention(tid, now), now)
	o.record(t, done)
	if !t.regime {
		return o.free(t)
	}
	if o.team != nil {
		if team, _ := o.team.Team(tid, now); team {
			t.teamUntil = now + teamHold
		}
		if now < t.teamUntil {
			return o.teamed(t)
		}
		t.teamRuns = 0
	}
	if t.left > 0 {
		return o.exploit(t)
	}
	return o.begin(t, o.mitigated(tid))
}

// contended: thread tid is in the contended regime (track), as of its
// last report.
func (o *armChooser) contended(tid int) bool {
	t := o.threads.Get(tid)
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.regime
}

// teamed: the device arm, nothing explored, while other threads of the
// process spin on other contended CPUs (an OpenMP team at its barrier,
// which a blocking arm would put out of step, teamScan), and for teamHold
// after the last window that found them. The run of the arm chosen before
// ends: once the team is gone, the next report explores afresh. A run
// lasts minExploit epochs, doubled with each report in a row that finds
// the team, up to teamMaxRun (while the CPU looks free again, exitCheck
// epochs, so that the regime can end on time, as exploit's runs do): a
// report calls into Go, whose runtime threads then wake and take the
// team's CPUs for moments, which can put it out of step as a block does
// (with a report every 0.4 s, the stand-in team of teamScan ran 11.7 ms
// per step with the library, median of five runs, 4.0 ms under CUDA's
// default in the same rounds).
func (o *armChooser) teamed(t *armThread) epochPlan {
	t.left = 0
	o.teamX.Add(1)
	n := min(o.span(epochLen)*minExploit<<min(t.teamRuns, 10), teamMaxRun)
	if t.freeSince != 0 {
		n = o.span(epochLen) * exitCheck
	}
	t.teamRuns++
	return o.run(t, epochPlan{Len: n}, ArmDevice)
}

// mitigated: the hint page says the agent gave thread tid a short slice.
func (o *armChooser) mitigated(tid int) bool {
	if o.mitig == nil {
		return false
	}
	_, ok := o.mitig.Mitigation(tid)
	return ok
}

// shortWaits: the thread's waits take too little of its time for
// blocking in them to gain exploreShare (measured outside the policy arm,
// whose blocked waits include the wake-ups).
func (t *armThread) shortWaits() bool {
	return t.wallNs > 0 && t.blockableNs < exploreShare*t.wallNs
}

// track moves the thread into or out of the contended regime.
func (t *armThread) track(c signal.Contention, now int64) {
	switch {
	case c == signal.ContentionShared || c == signal.ContentionThrottled:
		t.regime, t.freeSince = true, 0
	case !t.regime:
	case t.freeSince == 0:
		t.freeSince = now
	case now-t.freeSince >= RegimeExit:
		t.regime = false
	}
}

// record counts the epochs done, adds an exploration's to its sums, and
// decides when it is complete.
func (o *armChooser) record(t *armThread, done []EpochDone) {
	for i, d := range done[:min(len(done), len(t.plan))] {
		a := t.plan[i]
		o.epochs[a].Add(1)
		o.epochNs[a].Add(d.Wall)
		t.events = t.events/2 + float64(d.EventWaits)
		if a != ArmPolicy && a != ArmBlocking && d.Wall > 0 {
			o.blockableNs.Add(d.Blockable)
			o.outsideNs.Add(d.Wall)
			t.blockableNs = t.blockableNs/2 + float64(d.Blockable)
			t.wallNs = t.wallNs/2 + float64(d.Wall)
		}
		if t.exploring {
			o.exploreWaits[a].Add(d.Waits)
			o.exploreNs[a].Add(d.Wall)
			t.waits[a] += float64(d.Waits)
			t.wall[a] += float64(d.Wall)
			t.cpu[a] += float64(d.CPU)
		}
	}
	if t.exploring && len(done) == len(t.plan) {
		o.decide(t, t.mitigated)
	}
	t.exploring = false
}

// run sets e's arms and t's plan to arms.
func (o *armChooser) run(t *armThread, e epochPlan, arms ...Arm) epochPlan {
	e.N = copy(e.Arms[:], arms)
	t.plan = append(t.plan[:0], arms...)
	return e
}

// free: one epoch whose reports the caller may skip while its run delay
// stays flat: of the model, or, where the thread's waits are too short
// for anything but spinning (shortWaits), of the device arm, which the
// model would equal (it leaves such waits to CUDA) at a cost: it observes
// every launch and record, which the device arm skips (wait.c; the cost:
// docs/BENCHMARKS.md, "What the library's parts cost", "Launch observers,
// in one process").
// The share is measured in either arm, so a thread whose waits grow long
// returns to the model at its next report.
func (o *armChooser) free(t *armThread) epochPlan {
	e := epochPlan{Len: freeReport, Quiet: o.quiet, QuietFrac: signal.SharedDelayFrac}
	// A throttle is contention whatever the delay per run (a thread that
	// sleeps often spreads one refill's wait over many wake-ups), so
	// under a quota only the fraction counts.
	if o.quiet > 0 && o.period() == 0 {
		e.QuietPerRun = signal.SharedDelayPerRun
	}
	arm := ArmModel
	if t.shortWaits() {
		arm = ArmDevice
		if len(t.plan) == 0 || t.plan[0] != ArmDevice {
			o.settled.Add(1)
		}
	}
	return o.run(t, e, arm)
}

// exploit: the chosen arm for its remaining epochs, as one; while the
// CPU looks free again, for at most exitCheck of them, so that the regime
// can end on time.
func (o *armChooser) exploit(t *armThread) epochPlan {
	k := t.left
	if t.freeSince != 0 {
		k = min(k, exitCheck)
	}
	t.left -= k
	return o.run(t, epochPlan{Len: o.span(epochLen) * int64(k)}, t.best)
}

// begin starts an exploration: four epochs, ABBA or BAAB in turn (the
// first one BAAB: blocking first) of the device arm and the thread's
// policy, or, right after one of those that chose the policy for a thread
// that waits on events, of the policy's two ways (ArmPolicy,
// ArmBlocking); mitigated: the thread has the agent's short slice, which
// the decision at its end weighs.
func (o *armChooser) begin(t *armThread, mitigated bool) epochPlan {
	o.explorations.Add(1)
	if mitigated {
		o.mitigatedX.Add(1)
	}
	t.exploring, t.order, t.mitigated = true, 1-t.order, mitigated
	t.waits, t.wall, t.cpu = [arms]float64{}, [arms]float64{}, [arms]float64{}
	last := t.pair
	t.pair = [2]Arm{ArmDevice, t.policy}
	if last[0] == ArmDevice && t.decided && t.best != ArmDevice && t.events > 0 {
		t.pair = [2]Arm{ArmPolicy, ArmBlocking}
	}
	var a [len(explore)]Arm
	for i, x := range explore {
		a[i] = t.pair[x^t.order]
	}
	return o.run(t, epochPlan{Len: o.span(exploreLen), MinWaits: minEpochWaits, MaxLen: maxEpoch}, a[:]...)
}

// span is d rounded to whole periods of the process's CPU quota, if it
// has one (the nearest number of them, at least one). Against a 20 ms
// period, a 25 ms epoch holds one refill of the quota or two depending on
// where it starts (10 or 15 ms of CPU under 10 ms per 20 ms): a bias of
// up to 20% per epoch, which no order of the arms averages out. Whole
// periods hold the same quota each. The nearest, not the next: an
// exploring epoch of the worse arm costs its length (20 ms, not 40).
func (o *armChooser) span(d int64) int64 {
	if p := o.period(); p > 0 {
		return max((d+p/2)/p, 1) * p
	}
	return d
}

// period is the process's CPU quota period (ns), 0 without one.
func (o *armChooser) period() int64 {
	if o.quota == nil {
		return 0
	}
	return o.quota.QuotaPeriod()
}

// decide ends an exploration: smooth each arm's outcome, pick the better
// arm and how long to keep it. mitigated: blocking wakes at once (the
// agent's short slice), so the arm that blocks more wins ties and the
// policy needs no confirmation.
func (o *armChooser) decide(t *armThread, mitigated bool) {
	var rate, cpuPer [arms]float64 // this exploration's alone
	for _, a := range t.pair {
		if t.wall[a] <= 0 || t.waits[a] <= 0 {
			continue
		}
		rate[a], cpuPer[a] = t.waits[a]/t.wall[a], t.cpu[a]/t.waits[a]
		if t.rate[a] == 0 {
			t.rate[a], t.cpuPer[a] = rate[a], cpuPer[a]
		} else {
			t.rate[a], t.cpuPer[a] = (t.rate[a]+rate[a])/2, (t.cpuPer[a]+cpuPer[a])/2
		}
	}
	if t.pair[0] != ArmDevice {
		// The policy's two ways: the winner stands for the policy, for
		// as long as the last exploration against the device arm said.
		best, _ := better(t.pair, t.rate, t.cpuPer, mitigated, waysTieGap)
		t.policy = best
		o.keep(t, best, t.gap)
		return
	}
	best, gap := better(t.pair, t.rate, t.cpuPer, mitigated, tieGap)
	won, _ := better(t.pair, rate, cpuPer, mitigated, tieGap)
	confirmed := gap >= confirmGap || t.policyWon || o.period() > 0 || mitigated
	t.policyWon = won != ArmDevice
	if best != ArmDevice && !confirmed {
		o.deferred.Add(1)
		t.best, t.left, t.streak = ArmDevice, deferRun, 0
		return
	}
	if t.decided && best == t.best && won == best {
		t.streak = min(t.streak+1, 8)
	} else {
		t.streak = 0
	}
	t.gap = gap
	o.keep(t, best, gap)
	if best != ArmDevice && t.events > 0 && t.rate[ArmBlocking] == 0 {
		// The policy's two ways were never compared: compare them now,
		// not after the policy's run (up to maxExploit epochs), which
		// would leave a thread whose better way is ArmBlocking that
		// much behind it.
		t.left = 0
	}
}

// keep makes best the thread's arm for a run that grows with the gap it
// won by and doubles with the streak.
func (o *armChooser) keep(t *armThread, best Arm, gap float64) {
	t.left = min(max(int(gap*exploitPerGap), minExploit)<<t.streak, maxExploit)
	t.best, t.decided = best, true
	o.chosen[best].Add(1)
}

// blocks ranks the arms by how much of a thread's waiting they spend
// blocked.
var blocks = [arms]int{ArmModel: 0, ArmDevice: 0, ArmBlocking: 1, ArmPolicy: 2}

// better returns the arm of pair with the higher rate, or within tie
// the one with less CPU per wait (mitigated: the one that blocks more),
// and the relative gap between the rates.
func better(pair [2]Arm, rate, cpuPer [arms]float64, mitigated bool, tie float64) (Arm, float64) {
	a, b := pair[0], pair[1]
	if blocks[a] > blocks[b] {
		a, b = b, a // b blocks more: ties of CPU go to it
	}
	ra, rb := rate[a], rate[b]
	gap := (max(ra, rb) - min(ra, rb)) / max(ra, rb, 1e-300)
	switch {
	case gap < tie && mitigated:
		return b, gap
	case gap < tie && cpuPer[a] < cpuPer[b]:
		return a, gap
	case gap < tie:
		return b, gap
	case ra > rb:
		return a, gap
	}
	return b, gap
}

// ArmStats is what armChooser did, for the stats file.
type ArmStats struct {
	// Epochs and Seconds spent in each arm ("model", "device", "policy",
	// "blocking");
	// a run of the chosen arm's epochs counts as one.
	Epochs  map[string]uint64  `json:"epochs"`
	Seconds map[string]float64 `json:"seconds"`
	// Explorations started, and the arm each finished one chose.
	Explorations uint64            `json:"explorations"`
	Chosen       map[string]uint64 `json:"chosen"`
	// Settled: switches from the model to the device arm while the CPU
	// is free, the waits being too short a share of the time for
	// anything but spinning. Deferred: explorations that favoured the
	// policy arm by under confirmGap, the one before not: the device arm
	// ran on. Mitigated: explorations begun while the hint page said the
	// agent had given the thread a short slice.
	Settled   uint64 `json:"settled"`
	Deferred  uint64 `json:"deferred"`
	Mitigated uint64 `json:"mitigated"`
	// Team: reports on a contended CPU that found other threads of the
	// process spinning on other contended CPUs (an OpenMP team at its
	// barrier, which blocking would put out of step): the device arm ran,
	// nothing explored.
	Team uint64 `json:"team"`
	// Rates: waits per second of wall time in the exploring epochs of
	// each arm ("device", "policy", "blocking"), all threads together.
	Rates map[string]float64 `json:"rates"`
	// BlockableShare: of the time outside the policy arm, the share
	// that blocking could have given back (EpochDone.Blockable).
	BlockableShare float64 `json:"blockable_share"`
	// QuietChecks: reports skipped because the thread's CPU stayed free
	// (epochPlan.Quiet); counted by the caller, which sets it.
	QuietChecks uint64 `json:"quiet_checks"`
	// Reports made into Go, and the wall time their callers spent in
	// them (total and longest); counted by the caller, which sets them.
	Reports          uint64  `json:"reports"`
	ReportSeconds    float64 `json:"report_seconds"`
	ReportMaxSeconds float64 `json:"report_max_seconds"`
	// EventBlocks: event waits of the policy arm that blocked on a shadow
	// event (their events spin in CUDA's own wait whatever the schedule),
	// and the wall time they took; counted by the caller, which sets them.
	EventBlocks       uint64  `json:"event_blocks"`
	EventBlockSeconds float64 `json:"event_block_seconds"`
}

// Stats returns the totals so far (epochs still running are not counted).
func (o *armChooser) Stats() ArmStats {
	st := ArmStats{Epochs: map[string]uint64{}, Seconds: map[string]float64{}, Chosen: map[string]uint64{},
		Explorations: o.explorations.Load(), Settled: o.settled.Load(), Deferred: o.deferred.Load(),
		Mitigated: o.mitigatedX.Load(), Team: o.teamX.Load(), Rates: map[string]float64{}}
	if wall := o.outsideNs.Load(); wall > 0 {
		st.BlockableShare = float64(o.blockableNs.Load()) / float64(wall)
	}
	for a := range arms {
		st.Epochs[a.String()] = o.epochs[a].Load()
		st.Seconds[a.String()] = sec(o.epochNs[a].Load())
		if a != ArmModel {
			st.Chosen[a.String()] = o.chosen[a].Load()
			if ns := o.exploreNs[a].Load(); ns > 0 {
				st.Rates[a.String()] = float64(o.exploreWaits[a].Load()) / sec(ns)
			}
		}
	}
	return st
}
