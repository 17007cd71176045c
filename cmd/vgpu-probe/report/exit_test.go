package report

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBinaryExitsTwoOnBadInput builds vgpu-probe and runs it on a
// truncated results file: exit status 2, one line on stderr, nothing on
// stdout, no output file. This is the contract a script sees; the other
// tests check the error values main maps to it.
func TestBinaryExitsTwoOnBadInput(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to build the binary with")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "vgpu-probe")
	build := exec.Command(gobin, "build", "-o", bin, "github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	good, err := os.ReadFile(filepath.Join(testdata, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "results.json")
	os.WriteFile(bad, good[:1000], 0o644)
	out := filepath.Join(dir, "report.html")
	for _, args := range [][]string{
		{"report", bad, "--format", "html", "-o", out},
		{"report", "--agent", "http://127.0.0.1:1", "-o", out},
		{"report", "--prometheus", "http://127.0.0.1:1", "--range", "15m", "-o", out},
		{"report", bad, "--format", "pdf"},
	} {
		cmd := exec.Command(bin, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("%v: %v, want exit status 2; stderr %q", args, err, stderr.String())
		}
		if lines := strings.Count(strings.TrimRight(stderr.String(), "\n"), "\n"); lines != 0 || stderr.Len() == 0 {
			t.Errorf("%v: stderr is not one line: %q", args, stderr.String())
		}
		if stdout.Len() != 0 {
			t.Errorf("%v: stdout %q", args, stdout.String())
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%v: output file left", args)
		}
	}
}
