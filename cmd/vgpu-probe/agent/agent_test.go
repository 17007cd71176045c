package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/daemon"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
)

func TestNewCmdFlags(t *testing.T) {
	tests := []struct {
		args string
		want func(*Options) bool
	}{
		{"--pid 1", func(o *Options) bool { return o.Listen == DefaultListen && len(o.PIDs) == 1 && o.PIDs[0] == 1 }},
		{"--pid 1 --pid 2,3", func(o *Options) bool { return fmt.Sprint(o.PIDs) == "[1 2 3]" }},
		{"--cgroup /a --cgroup b", func(o *Options) bool { return fmt.Sprint(o.Cgroups) == "[/a b]" }},
		{"--libvirt-uri qemu:///system --listen :1", func(o *Options) bool { return o.LibvirtURI == "qemu:///system" && o.Listen == ":1" }},
		{"--pid 1 --once 5s --json", func(o *Options) bool { return o.Once == 5*time.Second && o.JSON }},
		{"--pid 1", func(o *Options) bool { return o.TraceEvery == 10*time.Second && o.TraceWindow == time.Second }},
		{"--pid 1 --trace-every 0", func(o *Options) bool { return o.TraceEvery == 0 }},
		{"", func(o *Options) bool { return o.Discover }}, // no target: every VM on the host
		{"--pid 1", func(o *Options) bool { return !o.Discover }},
		{"--discover --libvirt-uri qemu:///system", func(o *Options) bool { return o.Discover && o.LibvirtURI == "qemu:///system" }},
	}
	for _, tt := range tests {
		var got *Options
		cmd := NewCmd(func(o *Options) error { got = o; return nil })
		args := strings.Fields(tt.args)
		cmd.SetArgs(args)
		if err := cmd.Execute(); err != nil {
			t.Fatalf("%s: %v", tt.args, err)
		}
		if !tt.want(got) {
			t.Errorf("%s: options %+v", tt.args, got)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []daemon.Config{
		{Listen: DefaultListen, Window: time.Minute},                                     // nothing to watch
		{PIDs: []int{1}, JSON: true, Listen: DefaultListen, Window: time.Minute},         // --json without --once
		{PIDs: []int{1}, Listen: "nope", Window: time.Minute},                            // bad listen
		{PIDs: []int{-4}, Listen: DefaultListen, Window: time.Minute},                    // bad pid
		{PIDs: []int{1}, Once: -time.Second, Listen: DefaultListen, Window: time.Minute}, // negative once
		{PIDs: []int{1}, Listen: DefaultListen},                                          // no window
		{PIDs: []int{1}, Listen: DefaultListen, Window: time.Minute, TraceEvery: -time.Second},
		{PIDs: []int{1}, Listen: DefaultListen, Window: time.Minute, TraceEvery: time.Second},                               // no trace window
		{PIDs: []int{1}, Listen: DefaultListen, Window: time.Minute, TraceEvery: 2 * time.Minute, TraceWindow: time.Second}, // period > window
	} {
		o := Options{Config: c}
		if err := o.Validate(); !errors.Is(err, usage.ErrBadInput) {
			t.Errorf("%+v: got %v, want a usage error", c, err)
		}
	}
}

// What the agent cannot do as asked is bad input (exit 2), with the
// agent's one line.
func TestRunRequestIsBadInput(t *testing.T) {
	o := &Options{Ctx: context.Background(), Config: daemon.Config{PIDs: []int{os.Getpid()}, Listen: DefaultListen,
		Window: time.Minute, Once: time.Second, Out: &bytes.Buffer{}, Log: zerolog.Nop(), Geteuid: func() int { return 1000 },
		LoadProbe: func(bpfload.Options) (*bpfload.Probe, error) {
			t.Fatal("probe loaded when not root")
			return nil, nil
		}}}
	err := Run(o)
	want := "vgpu-probe agent must run as root: it loads eBPF programs and reads other processes' threads"
	if !errors.Is(err, usage.ErrBadInput) || err.Error() != want {
		t.Fatalf("got %v, want the usage error %q", err, want)
	}
}

func TestMitigateFlag(t *testing.T) {
	var got *Options
	cmd := NewCmd(func(o *Options) error { got = o; return nil })
	cmd.SetArgs([]string{"--pid", "1", "--mitigate", "slice=100us"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got.Mitigate != "slice=100us" {
		t.Fatalf("--mitigate read as %q", got.Mitigate)
	}
	for _, v := range []string{"slice=10us", "slice=1s", "slice", "100us", "slice=fast"} {
		o := Options{Config: daemon.Config{PIDs: []int{1}, Listen: DefaultListen, Window: time.Minute, Mitigate: v}}
		err := o.Validate()
		if !errors.Is(err, usage.ErrBadInput) || strings.Contains(err.Error(), "\n") {
			t.Errorf("--mitigate %s: got %v, want a one-line usage error", v, err)
		}
	}
}

func TestWebConfigFlag(t *testing.T) {
	var got *Options
	cmd := NewCmd(func(o *Options) error { got = o; return nil })
	cmd.SetArgs([]string{"--pid", "1", "--web.config.file", "/etc/vgpu-probe/web.yml"})
	if err := cmd.Execute(); err != nil || got.WebConfigFile != "/etc/vgpu-probe/web.yml" {
		t.Fatalf("%v, %+v", err, got)
	}
}

// A web config that is malformed, missing, or names missing certificate
// files is a one-line user error before any eBPF is loaded.
func TestWebConfigBadInput(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"malformed":    "tls_server_config: [\n  nope",
		"missing cert": "tls_server_config:\n  cert_file: absent.crt\n  key_file: absent.key\n",
		"absent":       "",
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yml")
		if body != "" {
			if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		o := &Options{Ctx: context.Background(), Config: daemon.Config{PIDs: []int{os.Getpid()}, Listen: DefaultListen,
			Window: time.Minute, WebConfigFile: p, Out: &bytes.Buffer{}, Log: zerolog.Nop(), Geteuid: func() int { return 0 },
			LoadProbe: func(bpfload.Options) (*bpfload.Probe, error) {
				t.Fatal("probe loaded despite a bad web config")
				return nil, nil
			}}}
		err := Run(o)
		if !errors.Is(err, usage.ErrBadInput) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "--web.config.file") {
			t.Errorf("%s: %v, want a one-line usage error naming the flag", name, err)
		}
	}
}

// hints-args prints the device that maps the page the agent publishes
// for VM (hintpage.FileName of its name, in --dir) as QEMU arguments, or
// Proxmox's args: line; a relative --dir is bad input.
func TestHintsArgs(t *testing.T) {
	run := func(args ...string) (string, error) {
		cmd := NewCmd(nil)
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"hints-args"}, args...))
		err := cmd.Execute()
		return out.String(), err
	}
	want := "-object memory-backend-file,id=vgpu-probe-hints,mem-path=/run/vgpu-probe/hints/vgpu-probe-hints-web_01,size=1M,share=on -device ivshmem-plain,memdev=vgpu-probe-hints\n"
	if got, err := run("--no-page", "web 01"); err != nil || got != want {
		t.Errorf("hints-args: %q %v, want %q", got, err, want)
	}
	if got, err := run("--proxmox", "--no-page", "--dir", "/run/a,b", "vm"); err != nil ||
		got != "args: -object memory-backend-file,id=vgpu-probe-hints,mem-path=/run/a,,b/vgpu-probe-hints-vm,size=1M,share=on -device ivshmem-plain,memdev=vgpu-probe-hints\n" {
		t.Errorf("hints-args --proxmox: %q %v", got, err)
	}
	if _, err := run("--dir", "shm", "vm"); !errors.Is(err, usage.ErrBadInput) {
		t.Errorf("relative --dir: %v, want bad input", err)
	}
}
