// Command libhybridsync is the C library: built with -buildmode=c-shared
// (libhybridsync.so) and -buildmode=c-archive (libhybridsync.a). Its C
// files are layered, each calling only the ones below it:
//
//	api.c, interpose.c  entry points: the public hs_* API, the LD_PRELOAD hooks
//	wait.c              the wait runner: one wait, and the thread's plan, as Go decided
//	deleg.c, life.c,    which waits go to CUDA's own; initialisation;
//	schedstat.c,        the thread's run delay; the C side's stats and
//	stats.c             the stats file at exit
//	gompspin.c          libgomp's spin count, found and set (ompfollow.go decides)
//	main.go (here)      Go: configuration, the hybridsync engine's verdicts, the stats
//	libhybridsync/hscore          the C core: CUDA, its waits, the launch registry
//
// The wait runner calls the functions exported here, which run the
// hybridsync engine over the C core: every choice of how a wait goes is
// hybridsync's (engine.go), and the C side executes it.
package main

/*
#cgo CFLAGS: -O2 -Wall -std=gnu11 -I${SRCDIR}/../hscore -I${SRCDIR}/../include
#cgo LDFLAGS: -ldl -lpthread
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "deleg.h"
#include "omplive.h"
#include "stats.h"
#include "wait.h"
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
	"github.com/vgpu-probe/vgpu-probe/libhybridsync/hscore"
)

func main() {}

// lib is one configuration of the primitive; hs_init replaces it.
type lib struct {
	s         *hybridsync.Syncer
	statsPath string
}

var (
	current atomic.Pointer[lib]
	initMu  sync.Mutex
	// names outlive configurations: ids handed out stay valid.
	names hybridsync.Names
)

// cgetenv reads the C environment: the host program may have changed it
// after load, and Go's copy would not show that.
func cgetenv(k string) string {
	ck := C.CString(k)
	defer C.free(unsafe.Pointer(ck))
	return C.GoString(C.getenv(ck))
}

// setErr copies msg into the C buffer buf of n bytes, cut to fit, ending
// in a NUL.
func setErr(buf *C.char, n C.size_t, msg string) {
	if buf == nil || n == 0 {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	k := copy(b[:n-1], msg)
	b[k] = 0
}

// configEnv is the environment overridden by hs_init's non-empty
// arguments (those of hsgo_check_config and hsgo_init).
func configEnv(mode *C.char, maxSpinUS C.double, stats *C.char, logLevel *C.char) func(string) string {
	override := map[string]string{}
	if mode != nil {
		override[hybridsync.EnvMode] = C.GoString(mode)
	}
	switch {
	case maxSpinUS < 0:
		override[hybridsync.EnvMaxSpin] = "inf"
	case maxSpinUS > 0:
		override[hybridsync.EnvMaxSpin] = strconv.FormatFloat(float64(maxSpinUS), 'f', -1, 64)
	}
	if stats != nil {
		override[hybridsync.EnvStats] = C.GoString(stats)
	}
	if logLevel != nil {
		override[hybridsync.EnvLog] = C.GoString(logLevel)
	}
	return func(k string) string {
		if v, ok := override[k]; ok {
			return v
		}
		return cgetenv(k)
	}
}

// hsgo_check_config checks the configuration (the environment overridden
// by the arguments, as hsgo_init reads it) and nothing else: life.c calls
// it first, before looking for CUDA. Returns 0 or HS_ERR_CONFIG (-3) with a
// message.
//
//export hsgo_check_config
func hsgo_check_config(mode *C.char, maxSpinUS C.double, stats *C.char, logLevel *C.char, errbuf *C.char, errlen C.size_t) C.int {
	intoGo.other.Add(1)
	if err := hybridsync.CheckEnv(configEnv(mode, maxSpinUS, stats, logLevel)); err != nil {
		setErr(errbuf, errlen, err.Error())
		return -3
	}
	return 0
}

// hsgo_init configures the primitive as hsgo_check_config reads the
// configuration. Returns 0 or HS_ERR_CONFIG (-3) with a message.
//
//export hsgo_init
func hsgo_init(mode *C.char, maxSpinUS C.double, stats *C.char, logLevel *C.char, errbuf *C.char, errlen C.size_t) C.int {
	intoGo.other.Add(1)
	cfg, err := hybridsync.ConfigFromEnv(configEnv(mode, maxSpinUS, stats, logLevel))
	if err != nil {
		setErr(errbuf, errlen, err.Error())
		return -3
	}
	lvl := C.CString(cfg.LogLevel)
	C.hs_set_log_level(C.hs_parse_log_level(lvl))
	C.free(unsafe.Pointer(lvl))
	if cfg.Refused != "" {
		m := C.CString(cfg.Refused)
		C.hs_log_user(m)
		C.free(unsafe.Pointer(m))
	}
	initMu.Lock()
	defer initMu.Unlock()
	C.hs_fast_reset()
	s := hybridsync.New(cfg.Config)
	// libomp's blocktime, adapted live where the program runs it and the
	// user left it alone (hybridsync/blocktime.go): decided here, set by
	// each reporting thread (omplive.c).
	s.EnableBlocktime(hybridsync.BlocktimeLive(clookupEnv, C.hs_omp_live_resolve() != 0, ompRuntime()))
	C.hs_omp_live_set(boolInt(s.BlocktimeStats().Active))
	d := s.Delegation()
	C.hs_delegate_mode(boolInt(d.On), C.int64_t(d.Short), C.int64_t(d.DoneAtStart))
	current.Store(&lib{s: s, statsPath: cfg.StatsPath})
	logf(C.HS_LOG_INFO, "mode %s", cfg.Mode)
	if cfg.Notice != "" {
		logf(C.HS_LOG_INFO, "%s", cfg.Notice)
	}
	return 0
}

func logf(level C.int, format string, args ...any) {
	m := C.CString(fmt.Sprintf(format, args...))
	C.hs_log_str(level, m)
	C.free(unsafe.Pointer(m))
}

// hsgo_sync runs the policy on w, whose work the caller found unfinished
// when pending is set (no query then). Returns the CUDA code, or -1 when
// the primitive is not configured (the caller then uses CUDA's own wait),
// and sets *shortWaits to the policy's verdict on the kernel's waits (1 short,
// 0 not, -1 none) for the caller to record: Go never calls back into C's
// delegation table, so a wait crosses into Go and back once.
//
//export hsgo_sync
func hsgo_sync(w *C.struct_hs_wait, pending C.int, shortWaits *C.int) C.int {
	if k := int(w.kind); k >= 0 && k < len(intoGo.waits) {
		intoGo.waits[k].Add(1)
	}
	*shortWaits = -1
	l := current.Load()
	if l == nil {
		return -1
	}
	hw := (*hscore.Wait)(unsafe.Pointer(w))
	k := hw.Kernel()
	var err error
	if pending != 0 {
		err = l.s.SyncPending(hw, k)
	} else {
		err = l.s.Sync(hw, k)
	}
	if k != 0 && l.s.Mode() == hybridsync.ModeHybrid {
		*shortWaits = boolInt(l.s.ShortWaits(k))
	}
	return C.int(hscore.CodeOf(err))
}

// The plan's size and the routes' numbers in C (wait.h) and in Go must
// agree: each term is a constant that does not convert to uint when
// negative, so a difference either way fails the build.
const (
	_ = uint(len(C.struct_hs_plan{}.steps)-len(hybridsync.Plan{}.Steps)) + uint(len(hybridsync.Plan{}.Steps)-len(C.struct_hs_plan{}.steps))
	_ = uint(C.HS_ROUTE_DEVICE-int(hybridsync.RouteDevice)) + uint(int(hybridsync.RouteDevice)-C.HS_ROUTE_DEVICE)
	_ = uint(C.HS_ROUTE_MODEL-int(hybridsync.RouteModel)) + uint(int(hybridsync.RouteModel)-C.HS_ROUTE_MODEL)
	_ = uint(C.HS_ROUTE_POLICY-int(hybridsync.RoutePolicy)) + uint(int(hybridsync.RoutePolicy)-C.HS_ROUTE_POLICY)
	_ = uint(C.HS_ROUTE_SHADOW-int(hybridsync.RouteShadow)) + uint(int(hybridsync.RouteShadow)-C.HS_ROUTE_SHADOW)
)

// hsgo_epoch reports the n epochs the calling thread ran (wait.c), at now,
// with its run delay and schedulings-in as read then (ok 0: none read),
// and its libomp blocktime (ms; -1: none it can set now, omplive.h), and
// sets its next plan, with the blocktime to set (-1: leave it): a struct
// hs_epoch_done[n] and a struct hs_plan (wait.h), passed untyped because
// cgo declares exported functions before the preamble's types.
//
//export hsgo_epoch
func hsgo_epoch(n C.int, doneArg unsafe.Pointer, now, delay, runs C.int64_t, ok C.int, blocktime C.int, planArg unsafe.Pointer) {
	intoGo.reports.Add(1)
	done, plan := (*C.struct_hs_epoch_done)(doneArg), (*C.struct_hs_plan)(planArg)
	p := hybridsync.DevicePlan() // not configured (shut down meanwhile)
	bt := -1
	if l := current.Load(); l != nil {
		var d [len(hybridsync.Plan{}.Steps)]hybridsync.EpochDone
		for i, x := range unsafe.Slice(done, min(int(n), len(d))) {
			d[i] = hybridsync.EpochDone{Waits: uint64(x.waits), Wall: int64(x.wall), CPU: int64(x.cpu), Blockable: int64(x.blockable),
				EventWaits: uint64(x.event_waits)}
		}
		tid := unix.Gettid()
		p = l.s.Report(tid, d[:min(int(n), len(d))], int64(now),
			signal.RunDelay{Delay: int64(delay), Runs: int64(runs), OK: ok != 0})
		bt = l.s.Blocktime(tid, int64(now), int(blocktime))
	}
	*plan = C.struct_hs_plan{n: C.int(p.N), len: C.int64_t(p.Len), extend: C.int64_t(p.Extend), max_len: C.int64_t(p.MaxLen),
		min_waits: C.ulong(p.MinWaits), quiet: C.int64_t(p.Quiet), quiet_frac: C.double(p.QuietFrac),
		quiet_per_run: C.int64_t(p.QuietPerRun), block_cost: C.int64_t(p.BlockCost), blocktime: C.int(bt)}
	for i := range min(p.N, len(p.Steps)) {
		st := p.Steps[i]
		plan.steps[i] = C.struct_hs_step{blocking: boolInt(st.Blocking), event: C.int(st.Event), other: C.int(st.Other),
			event_unswitched: C.int(st.EventUnswitched), other_unswitched: C.int(st.OtherUnswitched)}
	}
}

func boolInt(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

//export hsgo_kernel
func hsgo_kernel(name *C.char) C.uint64_t {
	intoGo.other.Add(1)
	if name == nil || *name == 0 {
		return 0
	}
	return C.uint64_t(names.ID(C.GoString(name)))
}

func kernelName(id hybridsync.KernelID) string {
	if n := names.Name(id); n != "" {
		return n
	}
	var buf [256]C.char
	if C.hs_kernel_describe(C.uint64_t(id), &buf[0], C.size_t(len(buf))) != 0 {
		return C.GoString(&buf[0])
	}
	return ""
}

// statsDoc is the stats file: hybridsync's Stats and the process.
// Engaged is always true here; a library that could not start writes an
// unengagedDoc instead. OpenMP (openmp.go) follows hybridsync's fields.
type statsDoc struct {
	PID     int  `json:"pid"`
	Engaged bool `json:"engaged"`
	hybridsync.Stats
	OpenMP    *openMP    `json:"openmp"`
	Crossings *crossings `json:"crossings"`
}

func statsJSON(l *lib) ([]byte, error) {
	st := l.s.Stats(kernelName)
	addFast(&st)
	if st.Outcomes != nil {
		st.Outcomes.QuietChecks = uint64(C.hs_quiet_checks())
		var ns, maxNs C.int64_t
		st.Outcomes.Reports = uint64(C.hs_reports(&ns, &maxNs))
		st.Outcomes.ReportSeconds = float64(ns) / 1e9
		st.Outcomes.ReportMaxSeconds = float64(maxNs) / 1e9
		var blockNs C.int64_t
		st.Outcomes.EventBlocks = uint64(C.hs_event_blocks(&blockNs))
		st.Outcomes.EventBlockSeconds = float64(blockNs) / 1e9
	}
	bt := l.s.BlocktimeStats()
	return json.Marshal(statsDoc{PID: os.Getpid(), Engaged: true, Stats: st, OpenMP: openMPStats(&bt), Crossings: crossingStats()})
}

// addFast merges the waits the C fast path counted (already complete when
// called, or left to CUDA's own wait) into st, as Sync itself counts them:
// calls of a known kernel; only the ready and delegated counts of an
// unknown one.
func addFast(st *hybridsync.Stats) {
	for i := range C.HS_FAST_SLOTS {
		var k C.uint64_t
		var n, d C.ulong
		if C.hs_fast_get(C.int(i), &k, &n, &d) == 0 || n+d == 0 {
			continue
		}
		id, c := hybridsync.KernelID(k), hybridsync.Counts{Ready: uint64(n), Delegated: uint64(d)}
		st.Ready += c.Ready
		st.Delegated += c.Delegated
		if id == 0 {
			st.UnknownKernels.Ready += c.Ready
			st.UnknownKernels.Delegated += c.Delegated
			continue
		}
		c.Calls = c.Ready + c.Delegated
		st.Calls += c.Calls
		found := false
		for j := range st.Kernels {
			if st.Kernels[j].ID == id {
				st.Kernels[j].Counts.Plus(c)
				found = true
			}
		}
		if !found {
			st.Kernels = append(st.Kernels, hybridsync.KernelStats{ID: id, Name: kernelName(id), Counts: c})
		}
	}
	sort.Slice(st.Kernels, func(i, j int) bool { return st.Kernels[i].ID < st.Kernels[j].ID })
}

// hsgo_stats_json: see hs_stats_json. -4: not configured.
//
//export hsgo_stats_json
func hsgo_stats_json(buf *C.char, n C.size_t) C.long {
	intoGo.other.Add(1)
	l := current.Load()
	if l == nil {
		return -4
	}
	b, err := statsJSON(l)
	if err != nil {
		return -1
	}
	if buf != nil && n > 0 {
		dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
		k := copy(dst[:n-1], b)
		dst[k] = 0
	}
	return C.long(len(b))
}

// unengagedDoc is the stats file of a library that tried to start and
// could not (no driver, a bad HYBRIDSYNC_* value): a user who asked for
// stats is told why the numbers are missing.
type unengagedDoc struct {
	Version int     `json:"version"`
	PID     int     `json:"pid"`
	Engaged bool    `json:"engaged"`
	Reason  string  `json:"reason"`
	OpenMP  *openMP `json:"openmp"`
}

// writeStats writes the stats file, if one was asked for.
func writeStats(l *lib) error {
	if l.statsPath == "" {
		return nil
	}
	b, err := statsJSON(l)
	if err != nil {
		return err
	}
	return hscore.WriteStats(l.statsPath, b)
}

// hsgo_write_unengaged writes the stats file HYBRIDSYNC_STATS names, if
// any, for a library that could not start, and why (stats.c, at exit).
//
//export hsgo_write_unengaged
func hsgo_write_unengaged(reason *C.char) {
	intoGo.other.Add(1)
	path := cgetenv(hybridsync.EnvStats)
	if path == "" {
		return
	}
	b, err := json.Marshal(unengagedDoc{Version: hybridsync.StatsVersion, PID: os.Getpid(), Reason: C.GoString(reason), OpenMP: openMPStats(&hybridsync.BlocktimeStats{Why: "the library did not start"})})
	if err == nil {
		err = hscore.WriteStats(path, b)
	}
	if err != nil {
		logf(C.HS_LOG_ERROR, "stats: %v", err)
	}
}

//export hsgo_write_stats
func hsgo_write_stats() C.int {
	intoGo.other.Add(1)
	l := current.Load()
	if l == nil {
		return -4
	}
	if err := writeStats(l); err != nil {
		logf(C.HS_LOG_ERROR, "stats: %v", err)
		return -1
	}
	return 0
}

//export hsgo_shutdown
func hsgo_shutdown() C.int {
	intoGo.other.Add(1)
	initMu.Lock()
	l := current.Swap(nil)
	initMu.Unlock()
	if l == nil {
		return -4
	}
	if err := writeStats(l); err != nil {
		logf(C.HS_LOG_ERROR, "stats: %v", err)
	}
	return 0
}
