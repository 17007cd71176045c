package daemon

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
)

// What was asked and cannot be done is a one-line request error before
// anything is loaded.
func TestRunBadRequest(t *testing.T) {
	noLoad := func(bpfload.Options) (*bpfload.Probe, error) {
		t.Fatal("probe loaded despite bad input")
		return nil, nil
	}
	base := func() *Config {
		return &Config{Listen: "127.0.0.1:0", Window: time.Minute, Once: time.Second,
			Out: &bytes.Buffer{}, Log: zerolog.Nop(), Geteuid: func() int { return 0 }, Capabilities: allCaps, LoadProbe: noLoad}
	}
	cases := map[string]func(*Config){
		"not root":       func(o *Config) { o.PIDs = []int{os.Getpid()}; o.Geteuid = func() int { return 1000 } },
		"no such pid":    func(o *Config) { o.PIDs = []int{1 << 30} },
		"no such cgroup": func(o *Config) { o.Cgroups = []string{"/nonexistent/vgpu-probe"} },
		"dead libvirt":   func(o *Config) { o.LibvirtURI = "/nonexistent/libvirt-sock" },
		"libvirt refuses": func(o *Config) {
			o.LibvirtURI = "x"
			o.NewLibvirt = func(string, zerolog.Logger) (targets.Source, error) { return nil, errors.New("refused") }
		},
	}
	for name, mod := range cases {
		o := base()
		mod(o)
		err := Run(context.Background(), o)
		if !errors.Is(err, ErrRequest) {
			t.Errorf("%s: got %v, want a request error", name, err)
			continue
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error spans lines: %q", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
}

// A kernel that refuses the programs is a failure (exit 1), not a bad
// request, with one clear line.
func TestRunKernelRefuses(t *testing.T) {
	o := &Config{PIDs: []int{os.Getpid()}, Listen: "127.0.0.1:0", Window: time.Minute, Once: time.Second,
		Out: &bytes.Buffer{}, Log: zerolog.Nop(), Geteuid: func() int { return 0 }, Capabilities: allCaps,
		LoadProbe: func(bpfload.Options) (*bpfload.Probe, error) {
			return nil, fmt.Errorf("%w: loading raw_tp programs: invalid argument", bpfload.ErrRefused)
		}}
	err := Run(context.Background(), o)
	if err == nil || errors.Is(err, ErrRequest) || !errors.Is(err, bpfload.ErrRefused) {
		t.Fatalf("got %v, want a failure wrapping ErrRefused, not a request error", err)
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
	o := &Config{PIDs: []int{child.Process.Pid}, Once: 2 * time.Second, JSON: true, Window: time.Minute,
		TraceEvery: 10 * time.Second, TraceWindow: time.Second, Out: &out, Log: zerolog.Nop()}
	if err := Run(context.Background(), o); err != nil {
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
