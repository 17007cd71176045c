// Package cudadev is the benchmark's real GPU: `vgpu-probe bench --device
// cuda`. Each step's kernel busy-waits on the GPU's %globaltimer for exactly
// the requested time; it is PTX text loaded through the driver API
// (cuModuleLoadData), and the driver is dlopen'ed, so building vgpu-probe
// needs neither nvcc nor CUDA. Waits go through the same C core and Event
// as libhybridsync (libhybridsync/hscore): the same query, the same blocking shadow
// event, the same hybridsync policy per mode.
package cudadev

/*
#cgo CFLAGS: -O2 -Wall -I${SRCDIR}/../hscore
#include <stdint.h>
#include <stdlib.h>
#include "cuda_abi.h"

typedef CUresult (*fn_i)(unsigned);
typedef CUresult (*fn_dev)(CUdevice *, int);
typedef CUresult (*fn_retain)(CUcontext *, CUdevice);
typedef CUresult (*fn_setctx)(CUcontext);
typedef CUresult (*fn_modload)(CUmodule *, const void *);
typedef CUresult (*fn_getfn)(CUfunction *, CUmodule, const char *);
typedef CUresult (*fn_stream)(CUstream *, unsigned);
typedef CUresult (*fn_event)(CUevent *, unsigned);
typedef CUresult (*fn_record)(CUevent, CUstream);
typedef CUresult (*fn_launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			      CUstream, void **, void **);

static CUresult c_init(void *f) { return ((fn_i)f)(0); }
static CUresult c_dev(void *f, CUdevice *d) { return ((fn_dev)f)(d, 0); }
static CUresult c_retain(void *f, CUcontext *c, CUdevice d) { return ((fn_retain)f)(c, d); }
static CUresult c_setctx(void *f, CUcontext c) { return ((fn_setctx)f)(c); }
static CUresult c_modload(void *f, CUmodule *m, const char *ptx) { return ((fn_modload)f)(m, ptx); }
static CUresult c_getfn(void *f, CUfunction *fn, CUmodule m, const char *name) { return ((fn_getfn)f)(fn, m, name); }
static CUresult c_stream(void *f, CUstream *s) { return ((fn_stream)f)(s, HS_CU_STREAM_NON_BLOCKING); }
static CUresult c_event(void *f, CUevent *e) { return ((fn_event)f)(e, HS_CU_EVENT_DISABLE_TIMING); }
static CUresult c_record(void *f, CUevent e, CUstream s) { return ((fn_record)f)(e, s); }
// c_launch runs the spin kernel for ns nanoseconds: one thread is enough,
// the kernel only waits.
static CUresult c_launch(void *f, CUfunction fn, CUstream s, uint64_t ns)
{
	void *params[] = {&ns};
	return ((fn_launch)f)(fn, 1, 1, 1, 1, 1, 1, 0, s, params, NULL);
}
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
	"unsafe"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/clock"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/simdev"
	"github.com/vgpu-probe/vgpu-probe/libhybridsync/hscore"
)

// spinPTX: wait until %globaltimer (ns) passes start + ns. sm_80 is the
// oldest target worth supporting here; the driver JITs it for the GPU.
const spinPTX = `.version 7.0
.target sm_80
.address_size 64
.visible .entry spin(.param .u64 ns)
{
	.reg .pred %p;
	.reg .b64 %rd<5>;
	ld.param.u64 %rd1, [ns];
	mov.u64 %rd2, %globaltimer;
	add.u64 %rd3, %rd2, %rd1;
WAIT:
	mov.u64 %rd4, %globaltimer;
	setp.lt.u64 %p, %rd4, %rd3;
	@%p bra WAIT;
	ret;
}
`

// Device is one stream on the first GPU, with the spin kernel loaded.
type Device struct {
	fn             C.CUfunction
	stream         C.CUstream
	event          C.CUevent
	launch, record unsafe.Pointer
}

type cudaErr struct {
	call string
	r    C.CUresult
}

func (e cudaErr) Error() string { return fmt.Sprintf("%s: CUDA error %d", e.call, int(e.r)) }

func sym(name string) (unsafe.Pointer, error) {
	p := hscore.Sym(name)
	if p == nil {
		return nil, fmt.Errorf("the CUDA driver has no %s", name)
	}
	return p, nil
}

// Open opens the GPU for one benchmark cell, on the calling (locked,
// pinned) thread, and returns the waiter for mode: hybridsync's Syncer,
// configured from HYBRIDSYNC_* as the C library is, with mode imposed.
// The command registers it as the benchmark's "cuda" device; this package
// knows nothing of the benchmark.
func Open(mode hybridsync.Mode) (*Device, func(hybridsync.Event, hybridsync.KernelID) error, func(), error) {
	if err := hscore.Load(); err != nil {
		return nil, nil, nil, err
	}
	names := []string{"cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuModuleLoadData",
		"cuModuleGetFunction", "cuStreamCreate", "cuEventCreate", "cuEventRecord", "cuLaunchKernel"}
	f := map[string]unsafe.Pointer{}
	for _, n := range names {
		p, err := sym(n)
		if err != nil {
			return nil, nil, nil, err
		}
		f[n] = p
	}
	check := func(call string, r C.CUresult) error {
		if r != 0 {
			return cudaErr{call, r}
		}
		return nil
	}
	var (
		dev C.CUdevice
		ctx C.CUcontext
		mod C.CUmodule
		d   Device
	)
	ptx := C.CString(spinPTX)
	defer C.free(unsafe.Pointer(ptx))
	name := C.CString("spin")
	defer C.free(unsafe.Pointer(name))
	for _, step := range []func() error{
		func() error { return check("cuInit", C.c_init(f["cuInit"])) },
		func() error { return check("cuDeviceGet", C.c_dev(f["cuDeviceGet"], &dev)) },
		func() error {
			return check("cuDevicePrimaryCtxRetain", C.c_retain(f["cuDevicePrimaryCtxRetain"], &ctx, dev))
		},
		func() error { return check("cuCtxSetCurrent", C.c_setctx(f["cuCtxSetCurrent"], ctx)) },
		func() error { return check("cuModuleLoadData", C.c_modload(f["cuModuleLoadData"], &mod, ptx)) },
		func() error {
			return check("cuModuleGetFunction", C.c_getfn(f["cuModuleGetFunction"], &d.fn, mod, name))
		},
		func() error { return check("cuStreamCreate", C.c_stream(f["cuStreamCreate"], &d.stream)) },
		func() error { return check("cuEventCreate", C.c_event(f["cuEventCreate"], &d.event)) },
	} {
		if err := step(); err != nil {
			return nil, nil, nil, err
		}
	}
	d.launch, d.record = f["cuLaunchKernel"], f["cuEventRecord"]
	cfg, err := hybridsync.ConfigFromEnv(os.Getenv)
	if err != nil {
		return nil, nil, nil, err
	}
	cfg.Mode = mode
	s := hybridsync.New(cfg.Config)
	// The context and module live as long as the cell's process.
	return &d, s.Sync, statsWriter(s, cfg.StatsPath), nil
}

// statsWriter returns what writes the cell's wait statistics where
// HYBRIDSYNC_STATS says (%p: the cell process's pid), as the library does
// at exit: per kernel, how each wait ended and what was learned.
func statsWriter(s *hybridsync.Syncer, pattern string) func() {
	if pattern == "" {
		return func() {}
	}
	return func() {
		b, err := json.Marshal(s.Stats(nil))
		if err == nil {
			err = hscore.WriteStats(pattern, b)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", hybridsync.EnvStats, err)
		}
	}
}

// Launch runs the spin kernel for dur and records the device's event after
// it. One event serves every step: the loop waits for each before the next.
func (d *Device) Launch(_ simdev.Kernel, dur time.Duration) (hybridsync.Event, error) {
	if r := C.c_launch(d.launch, d.fn, d.stream, C.uint64_t(max(dur, 0))); r != 0 {
		return nil, cudaErr{"cuLaunchKernel", r}
	}
	launched := clock.Now()
	if r := C.c_record(d.record, d.event, d.stream); r != 0 {
		return nil, cudaErr{"cuEventRecord", r}
	}
	return hscore.EventWait(unsafe.Pointer(d.event), 0, launched), nil
}
