package hybridsync

import (
	"slices"
	"strings"
	"testing"
)

// HYBRIDSYNC_OPENMP: bounded and default choose without measuring, auto
// measures every CPU this process may use, and anything else is a
// one-line error naming the variable.
func TestOpenMPEnvModes(t *testing.T) {
	if v, err := OpenMPEnv(OpenMPBounded); err != nil || !slices.Equal(v.Env, OpenMPSpin) {
		t.Errorf("bounded: %+v %v", v, err)
	}
	if v, err := OpenMPEnv(OpenMPDefault); err != nil || len(v.Env) != 0 {
		t.Errorf("default: %+v %v", v, err)
	}
	v, err := OpenMPEnv("")
	if err != nil || len(v.CPUs) == 0 || v.Waited < 0 || v.Waited > 1.5 {
		t.Errorf("auto: %+v %v", v, err)
	}
	t.Log(v)
	if _, err := OpenMPEnv("sometimes"); err == nil || !strings.Contains(err.Error(), "HYBRIDSYNC_OPENMP") || strings.Contains(err.Error(), "\n") {
		t.Errorf("a bad value: %v, want one line naming HYBRIDSYNC_OPENMP", err)
	}
}
