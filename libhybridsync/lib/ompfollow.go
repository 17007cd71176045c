package main

/*
#include "core.h"
#include "gompspin.h"
#include "ompt.h"
*/
import "C"

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"syscall"
	"unsafe"

	"github.com/vgpu-probe/vgpu-probe/hintpage"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/openmp"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
)

// follower follows libgomp's spin and libomp's blocktime while the
// program runs
// (hybridsync/openmp/ompfollow.go): started as the library loads, where
// hybridsync-run gave the program its GOMP_SPINCOUNT (the marker; its
// record HYBRIDSYNC_RUN_SET says so), whether or not the program ever
// calls CUDA. nil otherwise.
var follower *openmp.OMPFollower

func init() {
	v, ok := os.LookupEnv("GOMP_SPINCOUNT")
	if !ok || !openmp.SetByRun(os.LookupEnv, "GOMP_SPINCOUNT", v) {
		return
	}
	marker, err := strconv.ParseUint(v, 10, 64)
	if err != nil || marker <= openmp.GompSpinBounded {
		return // the bounded setting, HYBRIDSYNC_OPENMP=bounded: nothing to follow
	}
	// The page is read only where it says how the host shares this
	// guest's vCPUs (HintSource.CPUContention); a bad HYBRIDSYNC_HINTS is
	// said by the library's configuration check, not here.
	cfg, _ := hybridsync.ParseOnly(guestHints, signal.EnvHints)
	hints, _ := signal.HintsAt(cfg.HintsPath, nil, nil)
	follower = openmp.NewOMPFollower(runtimes{}, marker, hints,
		func(format string, args ...any) { logf(C.HS_LOG_INFO, format, args...) },
		func(format string, args ...any) { logf(C.HS_LOG_WARN, format, args...) })
	C.hs_gomp_set_following()
	go follower.Run(nil)
}

// runtimes are the OpenMP runtimes' waits in this process: GNU libgomp's
// spin count (gompspin.c) and LLVM/Intel libomp's blocktime, where libomp
// started the library as its tool (ompt.c).
type runtimes struct{}

func (runtimes) Loaded() bool { return libompReady() || gompLoaded() }

// gompLoaded asks the cheap question first (an object named libgomp*),
// then whether one is GNU's: LLVM installs libomp as libgomp.so.1 too.
func gompLoaded() bool {
	if C.hs_gomp_libgomp() == 0 {
		return false
	}
	names, _ := ompRuntimes()
	return slices.Contains(names, "libgomp")
}

func libompReady() bool { return C.hs_ompt_ready() != 0 }

// Locate finds libgomp's spin word and counts libomp where it is ready; a
// libgomp whose word cannot be told stops the following only where no
// libomp is followed instead.
func (runtimes) Locate(marker uint64) (int, string, error) {
	var n int
	var file string
	var err error
	if gompLoaded() {
		var name [512]C.char
		if n = int(C.hs_gomp_locate(C.ulonglong(marker), &name[0], C.ulong(len(name)))); n < 0 {
			n, err = 0, fmt.Errorf("a libgomp holds GOMP_SPINCOUNT=%d in more than one place", marker)
		}
		file = C.GoString((*C.char)(unsafe.Pointer(&name[0])))
	}
	if libompReady() {
		var v [128]C.char
		C.hs_ompt_runtime(&v[0], C.ulong(len(v)))
		if n++; file == "" {
			file = C.GoString((*C.char)(unsafe.Pointer(&v[0])))
		}
		err = nil
	}
	return n, file, err
}

func (runtimes) Store(w openmp.Waits) {
	C.hs_gomp_store(C.ulonglong(w.Spin))
	C.hs_ompt_want(C.int(w.BlocktimeMS))
}

// followStats is the follower's stats, nil where it was not started.
func followStats() *openmp.OMPFollowStats {
	if follower == nil {
		return nil
	}
	st := follower.Stats()
	return &st
}

// guestHints is the environment as the follower reads it: where
// HYBRIDSYNC_HINTS is unset (set empty: no page), the page `vgpu-probe
// guest` exposes in a VM, where root made it (in /dev/shm, which every
// local user may write, a file another user made there is not the host's
// page).
func guestHints(k string) string {
	if v, set := os.LookupEnv(k); set || k != signal.EnvHints {
		return v
	}
	fi, err := os.Lstat(hintpage.GuestPath)
	if err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != 0 {
		return ""
	}
	return hintpage.GuestPath
}
