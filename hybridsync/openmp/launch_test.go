package openmp

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/hybridsync"
)

// launch is Launch as hybridsync-openmp calls it, with HYBRIDSYNC_OPENMP
// set to mode and the rest of the environment as it is.
func launch(mode string) (Verdict, error) {
	c, err := hybridsync.ParseConfig(func(k string) string {
		if k == hybridsync.EnvOpenMP {
			return mode
		}
		return os.Getenv(k)
	}, hybridsync.Overrides{})
	if err != nil {
		return Verdict{}, err
	}
	return Launch(c, os.LookupEnv)
}

// HYBRIDSYNC_OPENMP: none but live measures; auto starts libgomp at the
// marker; anything else is a one-line error naming the variable.
func TestLaunchModes(t *testing.T) {
	if v, err := launch(hybridsync.OpenMPBounded); err != nil || !slices.Equal(v.Env, BoundedEnv) {
		t.Errorf("bounded: %+v %v", v, err)
	}
	if v, err := launch(hybridsync.OpenMPDefault); err != nil || len(v.Env) != 0 {
		t.Errorf("default: %+v %v", v, err)
	}
	for _, mode := range []string{"", hybridsync.OpenMPAuto} {
		if v, err := launch(mode); err != nil || !v.Follow || len(v.CPUs) != 0 || !slices.Equal(v.Env, []string{"GOMP_SPINCOUNT=299917"}) {
			t.Errorf("%q: %+v %v, want to follow from the marker, without a probe", mode, v, err)
		}
	}
	if _, err := launch("sometimes"); err == nil || !strings.Contains(err.Error(), "HYBRIDSYNC_OPENMP") || strings.Contains(err.Error(), "\n") {
		t.Errorf("a bad value: %v, want one line naming HYBRIDSYNC_OPENMP", err)
	}
}

// HYBRIDSYNC_OPENMP=live measures as auto and names the libomp to
// preload: HYBRIDSYNC_LIBOMP's, which must be an absolute path to a file
// LD_PRELOAD can hold; a bad one is a one-line error naming the variable.
func TestLaunchLive(t *testing.T) {
	lib := filepath.Join(t.TempDir(), "libomp.so.5")
	if err := os.WriteFile(lib, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(hybridsync.EnvLibomp, lib)
	v, err := launch(hybridsync.OpenMPLive)
	if err != nil || v.Preload != lib || len(v.CPUs) == 0 || v.Set != "" || !strings.Contains(v.String(), "OpenMP on "+lib) {
		t.Errorf("live: %+v (%v) %v", v, v, err)
	}
	for _, k := range []string{"OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY"} {
		t.Run(k, func(t *testing.T) {
			t.Setenv(k, "0")
			if _, err := launch(hybridsync.OpenMPLive); err == nil || !strings.Contains(err.Error(), k) || !strings.Contains(err.Error(), "KMP_AFFINITY") {
				t.Errorf("%s set: %v, want one line naming it and KMP_AFFINITY", k, err)
			}
		})
	}
	t.Setenv("OMP_PROC_BIND", "false")
	if _, err := launch(hybridsync.OpenMPLive); err != nil {
		t.Errorf("OMP_PROC_BIND=false: %v", err)
	}
	for _, bad := range []string{"libomp.so.5", "/nonexistent/libomp.so.5", filepath.Dir(lib), "/a b/libomp.so", "/a:b/libomp.so"} {
		t.Setenv(hybridsync.EnvLibomp, bad)
		if _, err := launch(hybridsync.OpenMPLive); err == nil || !strings.Contains(err.Error(), hybridsync.EnvLibomp) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s=%q: %v, want one line naming it", hybridsync.EnvLibomp, bad, err)
		}
	}
}

// A setting the user made wins, as hybridsync-run applies Launch's
// words: OMP_WAIT_POLICY leaves everything, a set GOMP_SPINCOUNT or
// KMP_BLOCKTIME (even empty) leaves that one.
func TestLaunchUserWins(t *testing.T) {
	for _, tc := range []struct {
		mode string
		env  map[string]string
		want []string
	}{
		{hybridsync.OpenMPAuto, map[string]string{"OMP_WAIT_POLICY": "active"}, nil},
		{hybridsync.OpenMPAuto, map[string]string{"GOMP_SPINCOUNT": ""}, nil},
		{hybridsync.OpenMPAuto, map[string]string{"KMP_BLOCKTIME": "5"}, []string{"GOMP_SPINCOUNT=299917"}},
		{hybridsync.OpenMPBounded, map[string]string{"OMP_WAIT_POLICY": "passive"}, nil},
		{hybridsync.OpenMPBounded, map[string]string{"GOMP_SPINCOUNT": "10"}, []string{"KMP_BLOCKTIME=0"}},
		{hybridsync.OpenMPBounded, map[string]string{"KMP_BLOCKTIME": ""}, []string{"GOMP_SPINCOUNT=1000"}},
		{hybridsync.OpenMPBounded, map[string]string{"GOMP_SPINCOUNT": "1", "KMP_BLOCKTIME": "1"}, nil},
	} {
		v, err := Launch(hybridsync.EnvConfig{OpenMP: tc.mode}, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
		if err != nil || !slices.Equal(v.Env, tc.want) {
			t.Errorf("%s with %v: %v %v, want %v", tc.mode, tc.env, v.Env, err, tc.want)
		}
	}
}

// Decide is the one rule: contended CPUs get the bounded waits, free ones
// what the caller keeps for them.
func TestDecide(t *testing.T) {
	free := Waits{Spin: Marker, BlocktimeMS: 200}
	if got := Decide(true, free); got != Bounded {
		t.Errorf("contended: %+v, want %+v", got, Bounded)
	}
	if got := Decide(false, free); got != free {
		t.Errorf("free: %+v, want %+v", got, free)
	}
	if !slices.Equal(BoundedEnv, []string{"GOMP_SPINCOUNT=1000", "KMP_BLOCKTIME=0"}) || Own.env() != nil {
		t.Errorf("words: bounded %v, own %v", BoundedEnv, Own.env())
	}
}
