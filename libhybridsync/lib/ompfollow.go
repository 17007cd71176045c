package main

/*
#include "core.h"
#include "gompspin.h"
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

// follower follows libgomp's spin while the program runs
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
	follower = openmp.NewOMPFollower(gompWord{}, marker, hints,
		func(format string, args ...any) { logf(C.HS_LOG_INFO, format, args...) },
		func(format string, args ...any) { logf(C.HS_LOG_WARN, format, args...) })
	C.hs_gomp_set_following()
	go follower.Run(nil)
}

// gompWord is libgomp's spin count in this process (gompspin.c).
type gompWord struct{}

// Loaded asks the cheap question first (an object named libgomp*), then
// whether one is GNU's: LLVM installs libomp as libgomp.so.1 too.
func (gompWord) Loaded() bool {
	if C.hs_gomp_libgomp() == 0 {
		return false
	}
	names, _ := ompRuntimes()
	return slices.Contains(names, "libgomp")
}

func (gompWord) Locate(marker uint64) (int, string, error) {
	var name [512]C.char
	n := int(C.hs_gomp_locate(C.ulonglong(marker), &name[0], C.ulong(len(name))))
	if n < 0 {
		return 0, "", fmt.Errorf("a libgomp holds GOMP_SPINCOUNT=%d in more than one place", marker)
	}
	return n, C.GoString((*C.char)(unsafe.Pointer(&name[0]))), nil
}

func (gompWord) Store(v uint64) { C.hs_gomp_store(C.ulonglong(v)) }

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
