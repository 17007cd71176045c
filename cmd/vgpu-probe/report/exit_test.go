package report

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBinaryExitsTwoOnBadInput builds vgpu-probe and runs it on a
// truncated results file, a FIFO and /dev/zero: exit status 2, one line
// on stderr, nothing on stdout, no output file. This is the contract a script sees; the other
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
	fifo := filepath.Join(dir, "fifo.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"report", bad, "--format", "html", "-o", out},
		{"report", fifo, "-o", out},
		{"report", "/dev/zero", "-o", out},
		{"report", "--agent", "http://127.0.0.1:1", "-o", out},
		{"report", "--prometheus", "http://127.0.0.1:1", "--range", "15m", "-o", out},
		{"report", bad, "--format", "pdf"},
	} {
		// Bounded: without the check, the FIFO would block for ever.
		ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
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

// TestBinaryExitsOnSignalWhileReadingStdin runs `vgpu-probe report -` on
// a pipe nobody writes to and signals it once it is blocked reading: it
// exits at once with 128+signal (130 for SIGINT, 143 for SIGTERM) and
// writes no output file.
func TestBinaryExitsOnSignalWhileReadingStdin(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	for sig, want := range map[syscall.Signal]int{syscall.SIGINT: 130, syscall.SIGTERM: 143} {
		out := filepath.Join(t.TempDir(), "report.txt")
		cmd := exec.Command(bin, "report", "-", "-o", out)
		stdin, err := cmd.StdinPipe() // held open, never written
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if !blockedOnPipe(cmd.Process.Pid) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Skip("no thread of the report ever showed a pipe read in /proc/PID/task/*/wchan, so there is no telling when the read started")
		}
		cmd.Process.Signal(sig)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err = <-done:
		case <-time.After(hangLimit):
			cmd.Process.Kill()
			<-done
			t.Fatalf("%v ignored while reading stdin", sig)
		}
		stdin.Close()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != want {
			t.Errorf("%v: %v, want exit status %d; stderr %q", sig, err, want, stderr.String())
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%v: output file left", sig)
		}
	}
}

// blockedOnPipe waits until a thread of pid sleeps in the kernel's pipe
// read (pipe_read, anon_pipe_read on newer kernels), at most hangLimit.
func blockedOnPipe(pid int) bool {
	for deadline := time.Now().Add(hangLimit); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		chans, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/wchan", pid))
		for _, c := range chans {
			if b, _ := os.ReadFile(c); strings.Contains(string(b), "pipe_read") {
				return true
			}
		}
	}
	return false
}
