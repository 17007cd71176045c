package nvml

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReadSeriesAcceptsTheMeasuredSample(t *testing.T) {
	s, err := ReadSeries(filepath.Join("..", "profiler", "testdata", "nvml.json"))
	if err != nil || len(s.Samples) == 0 {
		t.Fatalf("ReadSeries = %v", err)
	}
}

func TestParseSeriesRejectsImpossibleValues(t *testing.T) {
	good := func() Series {
		return Series{Version: SeriesVersion, Devices: []Device{{Index: 0, Name: "H200"}}, IntervalS: 0.1,
			Samples: []Sample{{Time: time.Unix(1, 0), GPU: 0, UtilPct: 70, MemUtilPct: 20, MemUsedBytes: 1 << 30, MemTotalBytes: 80 << 30,
				Processes: []Process{{PID: 7, SMPct: 60, MemPct: 10}}}}}
	}
	for _, tc := range []struct {
		field string
		spoil func(*Series)
	}{
		{"interval_s", func(s *Series) { s.IntervalS = 0 }},
		{"interval_s", func(s *Series) { s.IntervalS = -0.1 }},
		{"interval_s", func(s *Series) { s.IntervalS = 1e308 }},
		{"dropped", func(s *Series) { s.Dropped = -1 }},
		{"samples[0].gpu", func(s *Series) { s.Samples[0].GPU = -1 }},
		{"samples[0].util_pct", func(s *Series) { s.Samples[0].UtilPct = 101 }},
		{"samples[0].mem_util_pct", func(s *Series) { s.Samples[0].MemUtilPct = 4000000000 }},
		{"samples[0]: mem_used_bytes", func(s *Series) { s.Samples[0].MemUsedBytes = 81 << 30 }},
		{"samples[0].processes[0].sm_pct", func(s *Series) { s.Samples[0].Processes[0].SMPct = 250 }},
	} {
		s := good()
		tc.spoil(&s)
		b, _ := json.Marshal(s)
		_, err := ParseSeries("nvml.json", b)
		if err == nil {
			t.Errorf("%s: spoilt file accepted", tc.field)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "nvml.json: "+tc.field) || strings.Contains(msg, "\n") {
			t.Errorf("%s: error %q is not one line naming the file and the field", tc.field, msg)
		}
	}
	b, _ := json.Marshal(good())
	if _, err := ParseSeries("nvml.json", b); err != nil {
		t.Fatalf("the unspoilt file: %v", err)
	}
}

func TestReadSeriesRefusesADevice(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	if _, err := ReadSeries("/dev/zero"); err == nil || !strings.Contains(err.Error(), "device") {
		t.Errorf("/dev/zero: %v", err)
	}
}
