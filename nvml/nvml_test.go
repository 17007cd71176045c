package nvml

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

// fakeServer is a DGX A100 whose GPUs report utilisation util[i], an SM
// clock, memory, and one process sample per call after ts 100.
func fakeServer(util []uint32) *dgxa100.Server {
	s := dgxa100.New()
	for i, d := range s.Devices {
		dev := d.(*dgxa100.Device)
		u := util[i%len(util)]
		dev.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) {
			return gonvml.Utilization{Gpu: u, Memory: u / 2}, gonvml.SUCCESS
		}
		dev.GetClockInfoFunc = func(c gonvml.ClockType) (uint32, gonvml.Return) {
			if c != gonvml.CLOCK_SM {
				return 0, gonvml.ERROR_INVALID_ARGUMENT
			}
			return 1410, gonvml.SUCCESS
		}
		dev.GetProcessUtilizationFunc = func(last uint64) ([]gonvml.ProcessUtilizationSample, gonvml.Return) {
			if last >= 200 {
				return nil, gonvml.ERROR_NOT_FOUND
			}
			// As the real library does: the buffer's unused entries
			// (pid 0) and a process sampled twice.
			return []gonvml.ProcessUtilizationSample{{Pid: 4242, TimeStamp: last + 50, SmUtil: u / 2, MemUtil: 3},
				{Pid: 4242, TimeStamp: last + 100, SmUtil: u, MemUtil: 1}, {}, {}}, gonvml.SUCCESS
		}
	}
	return s
}

func TestSampleReadsEveryGPU(t *testing.T) {
	s, err := Open(fakeServer([]uint32{90, 10}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := len(s.Devices()); got != 8 {
		t.Fatalf("devices = %d, want 8", got)
	}
	if s.Devices()[0].Name == "" || s.Devices()[0].UUID == "" {
		t.Errorf("device 0 unnamed: %+v", s.Devices()[0])
	}
	now := time.Unix(1000, 0)
	smp, err := s.Sample(now)
	if err != nil {
		t.Fatal(err)
	}
	if len(smp) != 8 {
		t.Fatalf("samples = %d, want 8", len(smp))
	}
	a, b := smp[0], smp[1]
	if a.UtilPct != 90 || a.MemUtilPct != 45 || b.UtilPct != 10 || a.SMClockMHz != 1410 || !a.Time.Equal(now) || a.GPU != 0 || b.GPU != 1 {
		t.Errorf("sample 0 = %+v, sample 1 = %+v", a, b)
	}
	if a.MemTotalBytes == 0 {
		t.Errorf("memory total not read: %+v", a)
	}
	if len(a.Processes) != 1 || a.Processes[0].PID != 4242 || a.Processes[0].SMPct != 90 || a.Processes[0].MemPct != 3 {
		t.Errorf("processes = %+v", a.Processes)
	}
	// The second call asks only for process samples after the first's.
	s.Sample(now)
	smp, err = s.Sample(now)
	if err != nil {
		t.Fatal(err)
	}
	if len(smp[0].Processes) != 0 {
		t.Errorf("process samples repeated after NOT_FOUND: %+v", smp[0].Processes)
	}
}

func TestNoLibraryIsErrNoGPU(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() gonvml.Return { return gonvml.ERROR_LIBRARY_NOT_FOUND }}
	_, err := Open(lib)
	if !errors.Is(err, ErrNoGPU) {
		t.Fatalf("err = %v, want ErrNoGPU", err)
	}
	lib = &mock.Interface{
		InitFunc:           func() gonvml.Return { return gonvml.SUCCESS },
		ShutdownFunc:       func() gonvml.Return { return gonvml.SUCCESS },
		DeviceGetCountFunc: func() (int, gonvml.Return) { return 0, gonvml.SUCCESS },
	}
	if _, err := Open(lib); !errors.Is(err, ErrNoGPU) {
		t.Fatalf("no devices: err = %v, want ErrNoGPU", err)
	}
	lib.InitFunc = func() gonvml.Return { return gonvml.ERROR_UNKNOWN }
	if _, err := Open(lib); err == nil || errors.Is(err, ErrNoGPU) {
		t.Fatalf("unknown failure: err = %v, want an error that is not ErrNoGPU", err)
	}
}

func TestUnsupportedMetricStaysZero(t *testing.T) {
	srv := fakeServer([]uint32{50})
	dev := srv.Devices[0].(*dgxa100.Device)
	dev.GetClockInfoFunc = func(gonvml.ClockType) (uint32, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED }
	s, err := Open(srv)
	if err != nil {
		t.Fatal(err)
	}
	smp, err := s.Sample(time.Now())
	if err != nil {
		t.Fatalf("unsupported clock failed the sample: %v", err)
	}
	if smp[0].SMClockMHz != 0 || smp[0].UtilPct != 50 {
		t.Errorf("sample = %+v", smp[0])
	}
	dev.GetClockInfoFunc = func(gonvml.ClockType) (uint32, gonvml.Return) { return 0, gonvml.ERROR_GPU_IS_LOST }
	if _, err := s.Sample(time.Now()); err == nil {
		t.Fatal("lost GPU: no error")
	}
}

func TestRecordBoundsAndWritesSeries(t *testing.T) {
	s, err := Open(fakeServer([]uint32{70}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
	defer cancel()
	ser, err := s.Record(ctx, 5*time.Millisecond, 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(ser.Samples) != 20 || ser.Dropped == 0 {
		t.Fatalf("samples = %d dropped = %d, want 20 kept and some dropped", len(ser.Samples), ser.Dropped)
	}
	if _, err := s.Record(ctx, 0, 1); err == nil {
		t.Error("zero interval accepted")
	}
	path := filepath.Join(t.TempDir(), "nvml.json")
	b, _ := json.Marshal(ser)
	os.WriteFile(path, b, 0o644)
	got, err := ReadSeries(path)
	if err != nil || len(got.Samples) != 20 || got.Samples[0].UtilPct != 70 {
		t.Fatalf("ReadSeries = %+v, %v", got, err)
	}
	os.WriteFile(path, []byte(`{"version": 9, "samples": []}`), 0o644)
	if _, err := ReadSeries(path); !errors.Is(err, ErrNewerVersion) {
		t.Errorf("newer version: err = %v", err)
	}
	os.WriteFile(path, b[:len(b)/2], 0o644)
	if _, err := ReadSeries(path); err == nil {
		t.Error("truncated file accepted")
	}
}

func TestStartStop(t *testing.T) {
	s, err := Open(fakeServer([]uint32{40}))
	if err != nil {
		t.Fatal(err)
	}
	rec := s.Start(context.Background(), 2*time.Millisecond, 0)
	time.Sleep(30 * time.Millisecond)
	ser, err := rec.Stop()
	if err != nil {
		t.Fatal(err)
	}
	// 8 GPUs, a sample at once and then every 2 ms for 30 ms.
	if len(ser.Samples) < 8*3 || len(ser.Samples)%8 != 0 || ser.Version != SeriesVersion || len(ser.Devices) != 8 {
		t.Errorf("recorded %d samples of %d devices (version %d)", len(ser.Samples), len(ser.Devices), ser.Version)
	}
	for i := 1; i < len(ser.Samples); i++ {
		if ser.Samples[i].Time.Before(ser.Samples[i-1].Time) {
			t.Fatalf("samples out of order at %d", i)
		}
	}
}
