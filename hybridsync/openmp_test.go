package hybridsync

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// HYBRIDSYNC_OPENMP: none but live measures; auto sets nothing (the
// launcher gives libgomp its marker itself); anything else is a one-line error naming
// the variable.
func TestOpenMPEnvModes(t *testing.T) {
	if v, err := OpenMPEnv(OpenMPBounded); err != nil || !slices.Equal(v.Env, OpenMPSpin) {
		t.Errorf("bounded: %+v %v", v, err)
	}
	if v, err := OpenMPEnv(OpenMPDefault); err != nil || len(v.Env) != 0 {
		t.Errorf("default: %+v %v", v, err)
	}
	for _, mode := range []string{"", OpenMPAuto} {
		if v, err := OpenMPEnv(mode); err != nil || !v.Follow || len(v.CPUs) != 0 || len(v.Env) != 0 {
			t.Errorf("%q: %+v %v, want to follow, without a probe or a setting", mode, v, err)
		}
	}
	if _, err := OpenMPEnv("sometimes"); err == nil || !strings.Contains(err.Error(), "HYBRIDSYNC_OPENMP") || strings.Contains(err.Error(), "\n") {
		t.Errorf("a bad value: %v, want one line naming HYBRIDSYNC_OPENMP", err)
	}
}

// HYBRIDSYNC_OPENMP=live measures as auto and names the libomp to
// preload: HYBRIDSYNC_LIBOMP's, which must be an absolute path to a file
// LD_PRELOAD can hold; a bad one is a one-line error naming the variable.
func TestOpenMPEnvLive(t *testing.T) {
	lib := filepath.Join(t.TempDir(), "libomp.so.5")
	if err := os.WriteFile(lib, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvLibomp, lib)
	v, err := OpenMPEnv(OpenMPLive)
	if err != nil || v.Preload != lib || len(v.CPUs) == 0 || v.Set != "" || !strings.Contains(v.String(), "OpenMP on "+lib) {
		t.Errorf("live: %+v (%v) %v", v, v, err)
	}
	for _, k := range []string{"OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY"} {
		t.Run(k, func(t *testing.T) {
			t.Setenv(k, "0")
			if _, err := OpenMPEnv(OpenMPLive); err == nil || !strings.Contains(err.Error(), k) || !strings.Contains(err.Error(), "KMP_AFFINITY") {
				t.Errorf("%s set: %v, want one line naming it and KMP_AFFINITY", k, err)
			}
		})
	}
	t.Setenv("OMP_PROC_BIND", "false")
	if _, err := OpenMPEnv(OpenMPLive); err != nil {
		t.Errorf("OMP_PROC_BIND=false: %v", err)
	}
	for _, bad := range []string{"libomp.so.5", "/nonexistent/libomp.so.5", filepath.Dir(lib), "/a b/libomp.so", "/a:b/libomp.so"} {
		t.Setenv(EnvLibomp, bad)
		if _, err := OpenMPEnv(OpenMPLive); err == nil || !strings.Contains(err.Error(), EnvLibomp) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s=%q: %v, want one line naming it", EnvLibomp, bad, err)
		}
	}
}
