package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
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
	for _, o := range []Options{
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
		if err := o.Validate(); !errors.Is(err, usage.ErrBadInput) {
			t.Errorf("%+v: got %v, want a usage error", o, err)
		}
	}
}

// Bad input is a one-line user error before anything is loaded.
func TestRunBadInput(t *testing.T) {
	noLoad := func(bpfload.Options) (*bpfload.Probe, error) {
		t.Fatal("probe loaded despite bad input")
		return nil, nil
	}
	base := func() *Options {
		return &Options{Listen: DefaultListen, Window: time.Minute, Once: time.Second, Ctx: context.Background(),
			Out: &bytes.Buffer{}, Log: zerolog.Nop(), Geteuid: func() int { return 0 }, Capabilities: allCaps, LoadProbe: noLoad}
	}
	cases := map[string]func(*Options){
		"not root":       func(o *Options) { o.PIDs = []int{os.Getpid()}; o.Geteuid = func() int { return 1000 } },
		"no such pid":    func(o *Options) { o.PIDs = []int{1 << 30} },
		"no such cgroup": func(o *Options) { o.Cgroups = []string{"/nonexistent/vgpu-probe"} },
		"dead libvirt":   func(o *Options) { o.LibvirtURI = "/nonexistent/libvirt-sock" },
		"libvirt refuses": func(o *Options) {
			o.LibvirtURI = "x"
			o.NewLibvirt = func(string, zerolog.Logger) (targets.Source, error) { return nil, errors.New("refused") }
		},
	}
	for name, mod := range cases {
		o := base()
		mod(o)
		err := Run(o)
		if !errors.Is(err, usage.ErrBadInput) {
			t.Errorf("%s: got %v, want a usage error", name, err)
			continue
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error spans lines: %q", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
}

// A kernel that refuses the programs is a failure (exit 1), not bad input,
// with one clear line.
func TestRunKernelRefuses(t *testing.T) {
	o := &Options{PIDs: []int{os.Getpid()}, Listen: DefaultListen, Window: time.Minute, Once: time.Second,
		Ctx: context.Background(), Out: &bytes.Buffer{}, Log: zerolog.Nop(), Geteuid: func() int { return 0 }, Capabilities: allCaps,
		LoadProbe: func(bpfload.Options) (*bpfload.Probe, error) {
			return nil, fmt.Errorf("%w: loading raw_tp programs: invalid argument", bpfload.ErrRefused)
		}}
	err := Run(o)
	if err == nil || errors.Is(err, usage.ErrBadInput) || !errors.Is(err, bpfload.ErrRefused) {
		t.Fatalf("got %v, want a non-usage error wrapping ErrRefused", err)
	}
	t.Log(err)
}

// The real thing: --once 2s --json on a busy child process prints exactly
// one snapshot with the documented fields.
func TestOnceJSON(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the agent loads eBPF programs: needs root")
	}
	child := exec.Command("/bin/sh", "-c", "while :; do :; done")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()

	var out bytes.Buffer
	cmd := NewCmd(nil)
	cmd.SetOut(&out)
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"--pid", fmt.Sprint(child.Process.Pid), "--once", "2s", "--json"})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		if errors.Is(err, bpfload.ErrPermission) {
			t.Skipf("kernel does not let root load BPF: %v", err)
		}
		t.Fatal(err)
	}
	dec := json.NewDecoder(&out)
	var snap map[string]any
	if err := dec.Decode(&snap); err != nil {
		t.Fatalf("stdout is not a JSON snapshot: %v\n%s", err, out.String())
	}
	if dec.More() {
		t.Fatal("stdout holds more than one JSON value")
	}
	tg := snap["targets"].([]any)
	if len(tg) != 1 {
		t.Fatalf("targets: %v", tg)
	}
	target := tg[0].(map[string]any)
	if target["kind"] != "pid" || target["name"] != fmt.Sprint(child.Process.Pid) {
		t.Fatalf("target %v", target)
	}
	th := target["threads"].([]any)[0].(map[string]any)
	for _, k := range []string{"tid", "vcpu", "run_seconds", "offcpu_seconds", "preemptions", "run_p50_us", "offcpu_p50_us", "wake_p50_us"} {
		if _, ok := th[k]; !ok {
			t.Errorf("thread lacks %q: %v", k, th)
		}
	}
	// A busy loop runs most of the 2 s (it shares CPUs with whatever
	// else runs here, so only a loose bound).
	if rs := th["run_seconds"].(float64); rs < 0.2 || rs > 2.5 {
		t.Errorf("run_seconds %.3f for a busy loop watched for 2s", rs)
	}
}
