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
#include "hybridsync.h"
#include "omplive.h"
#include "stats.h"
#include "wait.h"
extern char **environ;
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/openmp"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
	"github.com/vgpu-probe/vgpu-probe/libhybridsync/hscore"
)

func main() {}

// lib is one configuration of the primitive; hs_init replaces it.
type lib struct {
	s         *hybridsync.Syncer
	e         *hybridsync.Engine // the plans and delegations C executes
	bt        *openmp.Blocktime  // libomp's blocktime, adapted live
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

// pending is the configuration hsgo_configure parsed, which hsgo_start
// starts: parsed once, before the C side looks for CUDA.
var pending *hybridsync.EnvConfig

// hsgo_check_env checks every HYBRIDSYNC_* variable of the environment
// (hybridsync.CheckEnv) and writes what is wrong into buf, one line per
// bad value, cut to fit: life.c's constructor says each as the library
// loads. Returns how many there are.
//
//export hsgo_check_env
func hsgo_check_env(buf *C.char, n C.size_t) C.int {
	intoGo.other.Add(1)
	errs := hybridsync.CheckEnv(cenviron())
	lines := make([]string, len(errs))
	for i, err := range errs {
		lines[i] = err.Error()
	}
	setErr(buf, n, strings.Join(lines, "\n"))
	return C.int(len(errs))
}

// cenviron is the C environment as NAME=VALUE words (cgetenv says why
// not Go's copy).
func cenviron() []string {
	var out []string
	for p := C.environ; p != nil && *p != nil; p = (**C.char)(unsafe.Add(unsafe.Pointer(p), unsafe.Sizeof(*p))) {
		out = append(out, C.GoString(*p))
	}
	return out
}

// hsgo_configure parses the configuration, the environment overridden by
// cfg's fields that are set (NULL: none), into pending: life.c calls it
// first, before looking for CUDA, so that a bad value is said as what it
// is. Returns 0 or HS_ERR_CONFIG (-3) with a message.
//
//export hsgo_configure
func hsgo_configure(cfg *C.struct_hs_config, errbuf *C.char, errlen C.size_t) C.int {
	intoGo.other.Add(1)
	var o hybridsync.Overrides
	if cfg != nil {
		o = hybridsync.Overrides{Mode: cstr(cfg.mode), StatsPath: cstr(cfg.stats_path), LogLevel: cstr(cfg.log_level),
			MaxSpinUS: float64(cfg.max_spin_us)}
	}
	c, err := hybridsync.ParseConfig(cgetenv, o)
	if err != nil {
		pending = nil
		setErr(errbuf, errlen, err.Error())
		return -3
	}
	pending = &c
	return 0
}

func cstr(p *C.char) string {
	if p == nil {
		return ""
	}
	return C.GoString(p)
}

// hsgo_start configures the primitive as hsgo_configure parsed it, under
// life.c's lock. Returns 0, or -3 where nothing was parsed.
//
//export hsgo_start
func hsgo_start() C.int {
	intoGo.other.Add(1)
	cfg := pending
	if cfg == nil {
		return -3
	}
	cfg.AddSources()
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
	e := hybridsync.NewEngine(s)
	// libomp's blocktime, adapted live where the program runs it and the
	// user left it alone (hybridsync/openmp/blocktime.go): decided here,
	// set by each reporting thread (omplive.c).
	bt := openmp.NewBlocktime(e, openmp.BlocktimeLive(clookupEnv, cfg.OpenMP, C.hs_omp_live_resolve() != 0, ompRuntime()))
	C.hs_omp_live_set(boolInt(bt.Stats().Active))
	d := e.Delegation()
	C.hs_delegate_mode(boolInt(d.On), C.int64_t(d.Short), C.int64_t(d.DoneAtStart))
	current.Store(&lib{s: s, e: e, bt: bt, statsPath: cfg.StatsPath})
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
			d[i] = goDone(x)
		}
		tid := unix.Gettid()
		p = l.e.Report(tid, d[:min(int(n), len(d))], int64(now),
			signal.RunDelay{Delay: int64(delay), Runs: int64(runs), OK: ok != 0})
		bt = l.bt.Next(tid, int64(now), int(blocktime))
	}
	*plan = cPlan(p, bt)
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
	st.Outcomes = l.e.Outcomes()
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
	bt := l.bt.Stats()
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
	b, err := json.Marshal(unengagedDoc{Version: hybridsync.StatsVersion, PID: os.Getpid(), Reason: C.GoString(reason), OpenMP: openMPStats(&openmp.BlocktimeStats{Why: "the library did not start"})})
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
