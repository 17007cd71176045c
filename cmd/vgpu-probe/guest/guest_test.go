package guest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/hintpage/ivshmem"
)

func opts(sys, out string) *Options {
	return &Options{Out: out, SysPCI: sys, Euid: func() int { return 0 }, Log: io.Discard}
}

func TestNewCmdFlags(t *testing.T) {
	var got *Options
	cmd := NewCmd(func(_ context.Context, o *Options) error { got = o; return nil })
	cmd.SetArgs([]string{"--device", "00:05.0", "--out", "/run/hints", "--once"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got.Device != "00:05.0" || got.Out != "/run/hints" || !got.Once || got.SysPCI != ivshmem.SysPCI {
		t.Errorf("options %+v", got)
	}
}

// What the user typed wrong is bad input (exit 2), in one line naming the
// flag; no device at all is a failure.
func TestErrors(t *testing.T) {
	sys := t.TempDir()
	if err := os.MkdirAll(filepath.Join(sys, "0000:00:03.0"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"vendor", "device"} {
		if err := os.WriteFile(filepath.Join(sys, "0000:00:03.0", name), []byte("0x1000\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "hints")
	ctx := context.Background()
	if err := Run(ctx, opts(sys, out)); !errors.Is(err, ivshmem.ErrNoDevice) || errors.Is(err, usage.ErrBadInput) {
		t.Errorf("no device: %v", err)
	}
	o := opts(sys, out)
	o.Euid = func() int { return 1000 }
	if err := Run(ctx, o); !errors.Is(err, usage.ErrBadInput) || !strings.Contains(err.Error(), "root") {
		t.Errorf("not root: %v", err)
	}
	for dev, want := range map[string]string{
		"5":            `--device "5": want a PCI address like 0000:00:05.0`,
		"0000:00:03.0": "--device 0000:00:03.0 is not an ivshmem device (PCI 1af4:1110)",
		"0000:00:09.0": "--device 0000:00:09.0: no such PCI device under " + sys,
	} {
		o := opts(sys, out)
		o.Device = dev
		if err := Run(ctx, o); !errors.Is(err, usage.ErrBadInput) || err.Error() != want {
			t.Errorf("--device %s: %v, want the usage error %q", dev, err, want)
		}
	}
	if err := Run(ctx, opts(sys, "relative")); !errors.Is(err, usage.ErrBadInput) {
		t.Errorf("relative --out: %v", err)
	}
}

// The command says what it exposed; --once leaves it, and without it the
// page goes when the context ends.
func TestRunUndoesOnCancel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root (CI runs the tests as root)")
	}
	sys := t.TempDir()
	dir := filepath.Join(sys, "0000:00:05.0")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"vendor": "0x1af4\n", "device": "0x1110\n", "enable": "0\n", "resource2": strings.Repeat("\x00", 8192)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "hints")
	var log bytes.Buffer
	o := opts(sys, out)
	o.Log = &log
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Run exposes, then finds the context ended and undoes it
	if err := Run(ctx, o); err != nil {
		t.Fatal(err)
	}
	want := "vgpu-probe guest: 0000:00:05.0 BAR2 at " + out + " (no hint page yet: readers fall back until the agent publishes)\n"
	if log.String() != want {
		t.Errorf("log %q, want %q", log.String(), want)
	}
	if _, err := os.Lstat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left behind: %v", out, err)
	}
}
