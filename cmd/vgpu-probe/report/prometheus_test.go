package report

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/profiler/promsource/promtest"
)

// Every bad --prometheus, --range or --match is one line of bad input
// (exit 2) and leaves no output file. The servers' failures are checked
// in detail in profiler/promsource; here, that the command maps them.
func TestPrometheusBadInput(t *testing.T) {
	fail := promtest.Start(t)
	down, garbage, slow, empty := fail.Down, fail.Garbage, fail.Slow, fail.Empty
	out := filepath.Join(t.TempDir(), "fleet.html")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--prometheus", down}, "cannot reach it"},
		{[]string{"--prometheus", garbage}, "not a Prometheus query API answer"},
		{[]string{"--prometheus", slow, "--timeout", "300ms"}, "no answer within 300ms"},
		{[]string{"--prometheus", empty}, "no vgpu-probe series"},
		{[]string{"--prometheus", "localhost:9090"}, "want http://HOST:PORT"},
		{[]string{"--prometheus", empty, "--match", `up{job="gpu"}`}, "--match"},
		{[]string{"--prometheus", empty, "--match", `{job=~"("}`}, "--match"},
		{[]string{"--prometheus", empty, "--range", "0s"}, "--range"},
		{[]string{"--prometheus", empty, "--range", "an hour"}, "--range"},
		{[]string{"--agent", down, "--match", `{job="gpu"}`}, "--match needs --prometheus"},
	} {
		_, err := runCmd(t, append(tc.args, "--format", "html", "-o", out)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v, want one line with %q", tc.args, err, tc.want)
		}
		if !errors.Is(err, usage.ErrBadInput) {
			t.Errorf("%v: %v not marked bad input (exit 2)", tc.args, err)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%v: output file left", tc.args)
		}
	}
}
