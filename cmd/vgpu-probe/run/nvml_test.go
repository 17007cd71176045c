package run

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"github.com/vgpu-probe/vgpu-probe/internal/reexec"
	"github.com/vgpu-probe/vgpu-probe/nvml"
)

// TestMain lets the experiment's VM processes, which are this test binary
// started again, run their entry points.
func TestMain(m *testing.M) {
	reexec.Init()
	os.Exit(m.Run())
}

// gpuServer is go-nvml's fake DGX A100 with the readings the sampler asks
// for filled in.
func gpuServer() *dgxa100.Server {
	s := dgxa100.New()
	for _, d := range s.Devices {
		dev := d.(*dgxa100.Device)
		dev.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) {
			return gonvml.Utilization{Gpu: 64, Memory: 12}, gonvml.SUCCESS
		}
		dev.GetClockInfoFunc = func(gonvml.ClockType) (uint32, gonvml.Return) { return 1410, gonvml.SUCCESS }
		dev.GetProcessUtilizationFunc = func(uint64) ([]gonvml.ProcessUtilizationSample, gonvml.Return) {
			return nil, gonvml.ERROR_NOT_FOUND
		}
	}
	return s
}

// smallRun runs a one-cell experiment with nvmlLib as the NVML library and
// returns what it said on stderr.
func smallRun(t *testing.T, out string, nvmlLib gonvml.Interface) string {
	t.Helper()
	_, stderr := runWith(t, nvmlLib, "--nvml", "--nvml-interval", "20ms", "--out", out)
	return stderr
}

// runWith runs a one-cell experiment with the flags args and nvmlLib as
// the NVML library (a test failure if it is opened while nvmlLib is nil),
// and returns what it printed on stdout and stderr.
func runWith(t *testing.T, nvmlLib gonvml.Interface, args ...string) (string, string) {
	t.Helper()
	o, err := parse(t, append([]string{"--scenario", "baseline", "--vcpus", "1", "--modes", "block", "--reps", "1", "--steps", "300",
		"--timeline-steps", "0"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	o.Out, o.Err = &stdout, &stderr
	o.NVML = func() gonvml.Interface {
		if nvmlLib == nil {
			t.Error("NVML opened")
			return &mock.Interface{InitFunc: func() gonvml.Return { return gonvml.ERROR_LIBRARY_NOT_FOUND }}
		}
		return nvmlLib
	}
	if err := Run(context.Background(), o); err != nil {
		t.Fatalf("run: %v (stderr %q)", err, stderr.String())
	}
	return stdout.String(), stderr.String()
}

// TestSimNoNVML: a run on the simulated GPU uses no GPU, so it neither
// opens NVML nor says anything about it.
func TestSimNoNVML(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	_, stderr := runWith(t, nil, "--device", "sim", "--out", out)
	if strings.Contains(stderr, "NVML") || strings.Contains(stderr, "GPU") {
		t.Errorf("stderr %q speaks of NVML on --device sim", stderr)
	}
	if files, _ := filepath.Glob(filepath.Join(out, "nvml-*.json")); len(files) != 0 {
		t.Errorf("wrote %v on --device sim", files)
	}
}

// TestNVMLDefault: NVML is on where a GPU is used (--device cuda) and
// where asked for (--nvml), off elsewhere and where refused. (This test
// binary has no cuda device registered, so the options are set directly.)
func TestNVMLDefault(t *testing.T) {
	every := 200 * time.Millisecond
	for _, tc := range []struct {
		name string
		o    Options
		want bool
	}{
		{"sim", Options{Device: "sim", NVMLInterval: every}, false},
		{"cuda", Options{Device: "cuda", NVMLInterval: every}, true},
		{"cuda --nvml=false", Options{Device: "cuda", NVMLInterval: every, nvmlSet: true}, false},
		{"cuda --nvml-interval 0", Options{Device: "cuda"}, false},
		{"sim --nvml", Options{Device: "sim", NVMLInterval: every, SampleNVML: true, nvmlSet: true}, true},
		{"--workload-cmd", Options{Device: "sim", WorkloadCmd: "true", NVMLInterval: every}, false},
		{"--workload-cmd --nvml", Options{Device: "sim", WorkloadCmd: "true", NVMLInterval: every, SampleNVML: true, nvmlSet: true}, true},
	} {
		if got := tc.o.sampleGPUs(); got != tc.want {
			t.Errorf("%s: samples GPUs %v, want %v", tc.name, got, tc.want)
		}
	}
	o, err := parse(t, "--nvml", "--out", t.TempDir())
	if err != nil || !o.nvmlSet || !o.SampleNVML {
		t.Errorf("--nvml parsed as set %v, on %v (%v)", o.nvmlSet, o.SampleNVML, err)
	}
}

// TestRunSamplesGPUs: with a GPU, the run leaves an NVML samples file
// beside results.json that the profiler's reader accepts.
func TestRunSamplesGPUs(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	smallRun(t, out, gpuServer())
	files, _ := filepath.Glob(filepath.Join(out, "nvml-*.json"))
	if len(files) != 1 {
		t.Fatalf("nvml files %v, want one", files)
	}
	s, err := nvml.ReadSeries(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Devices) != 8 || len(s.Samples) < 8 || s.Samples[0].UtilPct != 64 {
		t.Errorf("devices %d samples %d first %+v", len(s.Devices), len(s.Samples), s.Samples[0])
	}
	if got := s.IntervalS; got != (20 * time.Millisecond).Seconds() {
		t.Errorf("interval %v", got)
	}
}

// TestRunWithoutGPU: no GPU is said once and the run goes on.
func TestRunWithoutGPU(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	noGPU := &mock.Interface{InitFunc: func() gonvml.Return { return gonvml.ERROR_LIBRARY_NOT_FOUND }}
	stderr := smallRun(t, out, noGPU)
	if strings.Count(stderr, "GPU utilisation not sampled") != 1 {
		t.Errorf("stderr %q: want the missing GPU said once", stderr)
	}
	if files, _ := filepath.Glob(filepath.Join(out, "nvml-*.json")); len(files) != 0 {
		t.Errorf("wrote %v without a GPU", files)
	}
}
