package main

/*
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <link.h>
#include <string.h>

// The OpenMP runtimes loaded in this process, read at stats time.
// HS_OMP_GNU: GNU libgomp; HS_OMP_LLVM: LLVM's libomp or Intel's
// libiomp5 (the same runtime; both also answer libgomp's entry points).
enum { HS_OMP_GNU = 1, HS_OMP_LLVM = 2 };

// hs_omp_kind returns which runtime the loaded object path is, 0 if
// none: an object that itself defines __kmpc_fork_call is LLVM's or
// Intel's (whatever its file is called: LLVM installs libomp also as
// libgomp.so and libiomp5.so), one that defines GOMP_parallel and not
// that is GNU's. The symbol must be the object's own, not a dependency's:
// dlsym on a handle searches its dependencies too.
static int hs_omp_defines(void *h, const char *path, const char *sym)
{
	void *p = dlsym(h, sym);
	Dl_info di;
	return p && dladdr(p, &di) && di.dli_fname && strcmp(di.dli_fname, path) == 0;
}

static int hs_omp_kind(const char *path)
{
	void *h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
	if (!h)
		return 0;
	int kind = hs_omp_defines(h, path, "__kmpc_fork_call") ? HS_OMP_LLVM
	         : hs_omp_defines(h, path, "GOMP_parallel")    ? HS_OMP_GNU
	                                                        : 0;
	dlclose(h);
	return kind;
}

struct hs_omp_found {
	char paths[8][512];
	int kinds[8];
	int n;
};

// Objects whose file name starts with libgomp, libomp or libiomp (PyTorch's
// wheels carry libgomp-HASH.so.1): the candidates, asked what they are
// once the loader's list is no longer held (dlopen inside dl_iterate_phdr
// could wait on the loader's lock).
static int hs_omp_each(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct hs_omp_found *f = arg;
	const char *name = info->dlpi_name;
	if (!name || !*name || f->n == 8)
		return 0;
	const char *base = strrchr(name, '/');
	base = base ? base + 1 : name;
	if (strncmp(base, "libgomp", 7) != 0 && strncmp(base, "libomp", 6) != 0 && strncmp(base, "libiomp", 7) != 0)
		return 0;
	strncpy(f->paths[f->n], name, sizeof f->paths[0] - 1);
	f->paths[f->n][sizeof f->paths[0] - 1] = 0;
	f->n++;
	return 0;
}

// hs_omp_find fills f with the runtimes loaded, in load order; with none
// by those names, the object that defines omp_get_max_threads for the
// program, if any (a runtime linked statically, or under another name).
static void hs_omp_find(struct hs_omp_found *f)
{
	memset(f, 0, sizeof *f);
	dl_iterate_phdr(hs_omp_each, f);
	int n = 0;
	for (int i = 0; i < f->n; i++) {
		int kind = hs_omp_kind(f->paths[i]);
		if (!kind)
			continue;
		if (n != i)
			memcpy(f->paths[n], f->paths[i], sizeof f->paths[0]);
		f->kinds[n++] = kind;
	}
	f->n = n;
	if (n)
		return;
	void *p = dlsym(RTLD_DEFAULT, "omp_get_max_threads");
	Dl_info di;
	if (!p || !dladdr(p, &di) || !di.dli_fname)
		return;
	strncpy(f->paths[0], di.dli_fname, sizeof f->paths[0] - 1);
	f->kinds[0] = dlsym(RTLD_DEFAULT, "__kmpc_fork_call") ? HS_OMP_LLVM : HS_OMP_GNU;
	f->n = 1;
}
*/
import "C"

import (
	"path/filepath"
	"strings"
	"unsafe"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/openmp"
)

// openMP is the stats' "openmp" object: which OpenMP runtime the program
// ran with and the settings of its waits.
type openMP struct {
	// Runtime: "libgomp" (GNU), "libomp" (LLVM), "libiomp5" (Intel's
	// build of LLVM's) or "none"; several loaded: joined by "+", in load
	// order.
	Runtime string `json:"runtime"`
	// Libraries: the runtimes' files as loaded.
	Libraries []string `json:"libraries,omitempty"`
	// Env: the variables that set how the runtimes wait, as the
	// environment has them at stats time; an unset one is absent.
	Env map[string]string `json:"env"`
	// HybridsyncRun: the program was started by hybridsync-run.
	HybridsyncRun bool `json:"hybridsync_run"`
	// SetByHybridsyncRun: those of Env that hybridsync-run set (and that
	// still have the value it gave them).
	SetByHybridsyncRun []string `json:"set_by_hybridsync_run"`
	// BlocktimeLive: libomp's blocktime as the library adapts it while
	// the program runs (hybridsync/openmp/blocktime.go).
	BlocktimeLive *openmp.BlocktimeStats `json:"blocktime_live,omitempty"`
	// SpinLive: libgomp's spin as the library follows it while the
	// program runs (hybridsync/openmp/ompfollow.go); absent where hybridsync-run
	// did not ask for it.
	SpinLive *openmp.OMPFollowStats `json:"spin_live,omitempty"`
}

// ompWaitEnv are the variables that set an OpenMP runtime's waits.
var ompWaitEnv = []string{"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME"}

// ompRuntimes returns the OpenMP runtimes loaded, by name (libgomp,
// libomp, libiomp5), and their files, in load order.
func ompRuntimes() (names, paths []string) {
	var f C.struct_hs_omp_found
	C.hs_omp_find(&f)
	for i := range int(f.n) {
		path := C.GoString(&f.paths[i][0])
		name := "libgomp"
		if f.kinds[i] == C.HS_OMP_LLVM {
			name = "libomp"
			if strings.HasPrefix(filepath.Base(path), "libiomp") {
				name = "libiomp5"
			}
		}
		names = append(names, name)
		paths = append(paths, path)
	}
	return names, paths
}

// ompRuntime is the stats' runtime: the names joined by "+", or "none".
func ompRuntime() string {
	names, _ := ompRuntimes()
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "+")
}

// openMPStats makes the stats' openmp object, with the live adaptation's
// stats bt.
func openMPStats(bt *openmp.BlocktimeStats) *openMP {
	o := &openMP{Runtime: "none", Env: map[string]string{}, SetByHybridsyncRun: []string{}, BlocktimeLive: bt, SpinLive: followStats()}
	names, paths := ompRuntimes()
	o.Libraries = paths
	if len(names) > 0 {
		o.Runtime = strings.Join(names, "+")
	}
	for _, k := range ompWaitEnv {
		if v, ok := clookupEnv(k); ok {
			o.Env[k] = v
		}
	}
	_, o.HybridsyncRun = clookupEnv(hybridsync.EnvRunSet)
	for _, k := range ompWaitEnv {
		if v, set := o.Env[k]; set && openmp.SetByRun(clookupEnv, k, v) {
			o.SetByHybridsyncRun = append(o.SetByHybridsyncRun, k)
		}
	}
	return o
}

// clookupEnv is cgetenv telling an unset variable from an empty one.
func clookupEnv(k string) (string, bool) {
	ck := C.CString(k)
	defer C.free(unsafe.Pointer(ck))
	v := C.getenv(ck)
	if v == nil {
		return "", false
	}
	return C.GoString(v), true
}
