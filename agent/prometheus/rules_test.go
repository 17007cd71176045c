package prometheus

import (
	"os/exec"
	"testing"
)

// TestRules runs promtool's syntax check and the rules' unit tests:
// each recording rule's value and each alert's firing (and not firing)
// on series shaped like the exporter's.
func TestRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (.ci/setup-prometheus.sh installs it)")
	}
	for _, args := range [][]string{
		{"check", "rules", "vgpu-probe.rules.yml"},
		{"test", "rules", "vgpu-probe.rules.test.yml"},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
