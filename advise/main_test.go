package advise

import (
	"os"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/internal/reexec"
)

// TestMain lets the test binary be the child the apps suite runs each
// program in (reexec's "apps-exec").
func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}
