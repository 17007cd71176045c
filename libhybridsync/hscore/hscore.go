// Package hscore is the core of libhybridsync shared by the C library
// (libhybridsync/lib) and the benchmark's CUDA device (libhybridsync/cudadev): CUDA
// found at run time (core.c), the waits the hybridsync policy drives on
// CUDA events and streams, and the process-wide Syncer the C API uses.
//
// The policy itself is hybridsync's; nothing here decides how to wait.
package hscore

/*
#cgo CFLAGS: -O2 -Wall -std=gnu11 -fvisibility=hidden
#cgo LDFLAGS: -ldl -lpthread
#include <stdlib.h>
#include "core.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
)

// Load opens the CUDA driver (HYBRIDSYNC_CUDA_LIB or libcuda.so.1) and
// resolves every function the library uses, once.
func Load() error {
	if C.hs_core_load() != 0 {
		return errors.New(C.GoString(C.hs_core_error()))
	}
	return nil
}

// LogLevels are the C core's log levels (HYBRIDSYNC_LOG), by number: the
// list hybridsync.LogLevels must equal.
func LogLevels() []string {
	names := make([]string, C.HS_LOG_COUNT)
	for i := range names {
		names[i] = C.GoString(C.hs_log_level_name[i])
	}
	return names
}

// Sym returns a further driver function by name, nil if the driver lacks it.
func Sym(name string) unsafe.Pointer {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	return C.hs_core_sym(cs)
}

// Code is a CUDA result code (CUresult; the same number as the runtime's
// cudaError_t for every code a wait returns).
type Code int

const notReady = C.HS_CUDA_ERROR_NOT_READY

func (c Code) Error() string { return fmt.Sprintf("CUDA error %d", int(c)) }

func codeErr(r C.int) error {
	if r == 0 {
		return nil
	}
	return Code(r)
}

// CodeOf returns the CUDA code of an error from Sync: 0 for nil, the code
// for a Code, and CUDA_ERROR_UNKNOWN (999) for anything else.
func CodeOf(err error) int {
	if err == nil {
		return 0
	}
	var c Code
	if errors.As(err, &c) {
		return int(c)
	}
	return 999
}

// Wait is one wait on a CUDA event, stream or context: a hybridsync.Event
// over the C core. It holds no Go pointers, so C may own it (the C API
// passes one from its stack) and Go may (the benchmark's device).
type Wait C.struct_hs_wait

var (
	_ hybridsync.Event      = (*Wait)(nil)
	_ hybridsync.AutoWaiter = (*Wait)(nil)
)

// EventWait returns a wait for a CUevent (or cudaEvent_t) recorded after a
// kernel launched at launched (CLOCK_MONOTONIC ns, 0 if unknown).
func EventWait(ev unsafe.Pointer, kernel hybridsync.KernelID, launched int64) *Wait {
	return &Wait{handle: ev, kind: C.HS_WAIT_EVENT, kernel: C.uint64_t(kernel), launched: C.int64_t(launched)}
}

// Query is cuEventQuery (cuStreamQuery for streams): not done while it says
// CUDA_ERROR_NOT_READY.
func (w *Wait) Query() (bool, error) {
	r := C.hs_core_query((*C.struct_hs_wait)(w))
	if r == notReady {
		return false, nil
	}
	return true, codeErr(r)
}

// Wait blocks on a blocking-sync shadow event recorded now: the only place
// one is recorded, so waits that never block never pay its interrupt.
func (w *Wait) Wait() error { return codeErr(C.hs_core_block((*C.struct_hs_wait)(w))) }

// AutoWait is CUDA's own synchronize, with whatever schedule the context
// has (cuda-auto mode).
func (w *Wait) AutoWait() error { return codeErr(C.hs_core_autowait((*C.struct_hs_wait)(w))) }

// LaunchedAt is the launch time of the kernel the wait follows.
func (w *Wait) LaunchedAt() int64 { return int64(w.launched) }

// Kernel is the id of the kernel the wait follows.
func (w *Wait) Kernel() hybridsync.KernelID { return hybridsync.KernelID(w.kernel) }
