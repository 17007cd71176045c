package exporter

import (
	"net/http/httptest"
	"strings"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/nvml"
)

// TestGPUMetrics serves the readings of go-nvml's fake DGX A100 through
// the real sampler on /metrics, in base units.
func TestGPUMetrics(t *testing.T) {
	srv := dgxa100.New()
	for i, d := range srv.Devices {
		dev := d.(*dgxa100.Device)
		util := uint32(10 * (i + 1))
		dev.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) {
			return gonvml.Utilization{Gpu: util, Memory: 5}, gonvml.SUCCESS
		}
		dev.GetClockInfoFunc = func(gonvml.ClockType) (uint32, gonvml.Return) { return 1410, gonvml.SUCCESS }
		dev.GetProcessUtilizationFunc = func(last uint64) ([]gonvml.ProcessUtilizationSample, gonvml.Return) {
			return []gonvml.ProcessUtilizationSample{{Pid: 4242, TimeStamp: last + 1, SmUtil: util / 2}}, gonvml.SUCCESS
		}
	}
	s, err := nvml.Open(srv)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h, err := NewHandler(fixed{snap: testSnapshot()}, zerolog.Nop(), NewGPUCollector(s))
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(h)
	defer web.Close()
	body := get(t, web.URL+"/metrics", 200)
	name := s.Devices()[1].Name
	for _, line := range []string{
		`vgpu_probe_gpu_utilization_ratio{gpu="1",name="` + name + `"} 0.2`,
		`vgpu_probe_gpu_sm_clock_hertz{gpu="0",name="` + name + `"} 1.41e+09`,
		`vgpu_probe_gpu_process_sm_utilization_ratio{gpu="1",name="` + name + `",pid="4242"} 0.1`,
		`vgpu_probe_scrape_collector_success{collector="gpu"} 1`,
		`vgpu_probe_scrape_collector_success{collector="vcpu"} 1`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
}
