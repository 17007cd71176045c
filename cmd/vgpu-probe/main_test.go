package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/experiments/reexec"
)

func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// TestExitCodes: bad input exits 2 with one line on stderr and nothing on
// stdout; --help and --version exit 0.
func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"--version"}, 0},
		{[]string{"--help"}, 0},
		{[]string{"bench", "--help"}, 0},
		{[]string{"no-such-command"}, 2},
		{[]string{"bench", "--no-such-flag"}, 2},
		{[]string{"bench", "--modes", "telepathy"}, 2},
		{[]string{"bench", "--contention", "earthquake"}, 2},
		{[]string{"bench", "--kernel-us", "-5"}, 2},
		{[]string{"bench", "--profile", "/nonexistent/profile"}, 2},
		{[]string{"bench", "--steps", "0"}, 2},
		{[]string{"bench", "--cpu", "4096"}, 2},
		{[]string{"bench", "--log-level", "chatty"}, 2},
	} {
		var out, errb bytes.Buffer
		code := run(tc.args, &out, &errb)
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d (stderr %q)", tc.args, code, tc.code, errb.String())
		}
		if tc.code == 2 {
			if n := strings.Count(strings.TrimSpace(errb.String()), "\n"); n != 0 {
				t.Errorf("%v: %d lines on stderr, want one: %q", tc.args, n+1, errb.String())
			}
			if out.Len() != 0 {
				t.Errorf("%v: wrote to stdout on bad input: %q", tc.args, out.String())
			}
		}
	}
}

func TestBadProfileFile(t *testing.T) {
	p := t.TempDir() + "/profile"
	os.WriteFile(p, []byte("nonbonded fast\n"), 0o644)
	var out, errb bytes.Buffer
	if code := run([]string{"bench", "--profile", p}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "line 1") {
		t.Errorf("exit %d, stderr %q; want 2 and the line that failed", code, errb.String())
	}
}

// TestExitCodeOfSignal: a command ended by SIGINT or SIGTERM exits 130 or
// 143, as shells report a process killed by them; bad input stays 2.
func TestExitCodeOfSignal(t *testing.T) {
	for _, tc := range []struct {
		err, cause error
		want       int
	}{
		{nil, nil, 0},
		{errors.New("failed"), nil, 1},
		{context.Canceled, interrupted{syscall.SIGINT}, 130},
		{fmt.Errorf("interrupted: %w", context.Canceled), interrupted{syscall.SIGTERM}, 143},
		{errors.New("failed"), context.Canceled, 1},
		{usage.Errorf("bad"), interrupted{syscall.SIGINT}, 2},
		{nil, interrupted{syscall.SIGINT}, 0},
	} {
		if got := exitCode(tc.err, tc.cause); got != tc.want {
			t.Errorf("exitCode(%v, %v) = %d, want %d", tc.err, tc.cause, got, tc.want)
		}
	}
	if !errors.Is(interrupted{syscall.SIGINT}, context.Canceled) {
		t.Error("the signal cause is not a context.Canceled")
	}
}
