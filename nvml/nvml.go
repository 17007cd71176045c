package nvml

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ErrNoGPU means this host has no NVIDIA GPU or no NVML library: GPU
// metrics are absent, everything else works.
var ErrNoGPU = errors.New("no NVIDIA GPU or NVML on this host")

// SeriesVersion is the format version of Series files.
const SeriesVersion = 1

// Device names one GPU.
type Device struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
	UUID  string `json:"uuid"`
}

// Process is one process's share of a GPU in the last sampling interval.
type Process struct {
	PID    uint32 `json:"pid"`
	SMPct  uint32 `json:"sm_pct"`
	MemPct uint32 `json:"mem_pct"`
}

// Sample is one reading of one GPU. Metrics the device does not support
// are left zero.
type Sample struct {
	Time          time.Time `json:"time"`
	GPU           int       `json:"gpu"`
	UtilPct       uint32    `json:"util_pct"`     // share of time a kernel ran
	MemUtilPct    uint32    `json:"mem_util_pct"` // share of time memory was read or written
	SMClockMHz    uint32    `json:"sm_clock_mhz"`
	MemUsedBytes  uint64    `json:"mem_used_bytes"`
	MemTotalBytes uint64    `json:"mem_total_bytes"`
	Processes     []Process `json:"processes,omitempty"`
}

// Series is what a recording produced: the file the runner and the agent
// write and the profiler reads.
type Series struct {
	Version int      `json:"version"`
	Devices []Device `json:"devices"`
	// IntervalS is the sampling period asked for.
	IntervalS float64  `json:"interval_s"`
	Samples   []Sample `json:"samples"`
	// Dropped counts samples left out because the recording was full.
	Dropped int `json:"dropped,omitempty"`
}

// Sampler reads the GPUs of one NVML library. Its methods may be called
// from several goroutines.
type Sampler struct {
	lib  gonvml.Interface
	devs []gonvml.Device
	info []Device

	mu sync.Mutex
	// lastProc is, per device, the NVML timestamp (µs) of the newest
	// process sample seen: GetProcessUtilization returns those after it.
	lastProc []uint64 // guarded by mu
}

// Open initialises lib and finds its GPUs. Without a GPU or NVML the error
// wraps ErrNoGPU.
func Open(lib gonvml.Interface) (*Sampler, error) {
	if ret := lib.Init(); ret != gonvml.SUCCESS {
		if ret == gonvml.ERROR_LIBRARY_NOT_FOUND || ret == gonvml.ERROR_DRIVER_NOT_LOADED || ret == gonvml.ERROR_NO_PERMISSION {
			return nil, fmt.Errorf("nvml init: %v: %w", gonvml.ErrorString(ret), ErrNoGPU)
		}
		return nil, fmt.Errorf("nvml init: %v", gonvml.ErrorString(ret))
	}
	n, ret := lib.DeviceGetCount()
	if ret != gonvml.SUCCESS {
		lib.Shutdown()
		return nil, fmt.Errorf("nvml device count: %v", gonvml.ErrorString(ret))
	}
	if n == 0 {
		lib.Shutdown()
		return nil, fmt.Errorf("nvml: no devices: %w", ErrNoGPU)
	}
	s := &Sampler{lib: lib, lastProc: make([]uint64, n)}
	for i := range n {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != gonvml.SUCCESS {
			lib.Shutdown()
			return nil, fmt.Errorf("nvml device %d: %v", i, gonvml.ErrorString(ret))
		}
		info := Device{Index: i}
		// Name and UUID only label the plots; a device that cannot say
		// is still sampled.
		if name, ret := d.GetName(); ret == gonvml.SUCCESS {
			info.Name = name
		}
		if uuid, ret := d.GetUUID(); ret == gonvml.SUCCESS {
			info.UUID = uuid
		}
		s.devs = append(s.devs, d)
		s.info = append(s.info, info)
	}
	return s, nil
}

// Devices lists the GPUs being sampled.
func (s *Sampler) Devices() []Device { return append([]Device(nil), s.info...) }

// Close shuts NVML down.
func (s *Sampler) Close() error {
	if ret := s.lib.Shutdown(); ret != gonvml.SUCCESS {
		return fmt.Errorf("nvml shutdown: %v", gonvml.ErrorString(ret))
	}
	return nil
}

// Sample reads every GPU once. A metric the device does not support
// (ERROR_NOT_SUPPORTED, common on consumer boards and vGPUs) stays zero;
// any other failure is an error naming the metric and the device.
func (s *Sampler) Sample(now time.Time) ([]Sample, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Sample, 0, len(s.devs))
	for i, d := range s.devs {
		smp := Sample{Time: now, GPU: i}
		u, ret := d.GetUtilizationRates()
		if err := check(ret, "utilisation", i); err != nil {
			return nil, err
		}
		smp.UtilPct, smp.MemUtilPct = u.Gpu, u.Memory
		clk, ret := d.GetClockInfo(gonvml.CLOCK_SM)
		if err := check(ret, "SM clock", i); err != nil {
			return nil, err
		}
		smp.SMClockMHz = clk
		mem, ret := d.GetMemoryInfo()
		if err := check(ret, "memory", i); err != nil {
			return nil, err
		}
		smp.MemUsedBytes, smp.MemTotalBytes = mem.Used, mem.Total
		ps, ret := d.GetProcessUtilization(s.lastProc[i])
		// NOT_FOUND: no process used the GPU since the last sample.
		if ret != gonvml.ERROR_NOT_FOUND {
			if err := check(ret, "process utilisation", i); err != nil {
				return nil, err
			}
		}
		// NVML fills its whole buffer: unused entries have pid 0, and a
		// process sampled several times since the last call appears
		// once per sample. Keep one entry per process, its busiest.
		at := map[uint32]int{}
		for _, p := range ps {
			if p.Pid == 0 {
				continue
			}
			s.lastProc[i] = max(s.lastProc[i], p.TimeStamp)
			if j, ok := at[p.Pid]; ok {
				q := &smp.Processes[j]
				q.SMPct, q.MemPct = max(q.SMPct, p.SmUtil), max(q.MemPct, p.MemUtil)
				continue
			}
			at[p.Pid] = len(smp.Processes)
			smp.Processes = append(smp.Processes, Process{PID: p.Pid, SMPct: p.SmUtil, MemPct: p.MemUtil})
		}
		out = append(out, smp)
	}
	return out, nil
}

func check(ret gonvml.Return, what string, dev int) error {
	if ret == gonvml.SUCCESS || ret == gonvml.ERROR_NOT_SUPPORTED {
		return nil
	}
	return fmt.Errorf("nvml %s of GPU %d: %v", what, dev, gonvml.ErrorString(ret))
}

// Record samples every interval until ctx ends and returns what it read,
// keeping at most limit samples (the oldest; later ones are counted in
// Dropped) so that a long run cannot grow without bound. A failed sample
// ends the recording with what was read so far and the error.
func (s *Sampler) Record(ctx context.Context, interval time.Duration, limit int) (Series, error) {
	if interval <= 0 {
		return Series{}, fmt.Errorf("nvml: sampling interval %v: want > 0", interval)
	}
	ser := Series{Version: SeriesVersion, Devices: s.Devices(), IntervalS: interval.Seconds()}
	err := s.Run(ctx, interval, func(smp []Sample) {
		for _, x := range smp {
			if limit > 0 && len(ser.Samples) >= limit {
				ser.Dropped++
				continue
			}
			ser.Samples = append(ser.Samples, x)
		}
	})
	return ser, err
}

// Run calls emit with every GPU's sample every interval until ctx ends
// (nil error) or a sample fails. The first sample is taken at once.
func (s *Sampler) Run(ctx context.Context, interval time.Duration, emit func([]Sample)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		smp, err := s.Sample(time.Now())
		if err != nil {
			return err
		}
		emit(smp)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Recording is a Record running in the background, for a caller that
// brackets work with start and stop (the runner around a cell, the agent
// around a window).
type Recording struct {
	cancel context.CancelFunc
	done   chan struct{}
	ser    Series
	err    error
}

// Start begins recording every interval, keeping at most limit samples.
func (s *Sampler) Start(ctx context.Context, interval time.Duration, limit int) *Recording {
	ctx, cancel := context.WithCancel(ctx)
	r := &Recording{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.ser, r.err = s.Record(ctx, interval, limit)
	}()
	return r
}

// Stop ends the recording and returns what it read.
func (r *Recording) Stop() (Series, error) {
	r.cancel()
	<-r.done
	return r.ser, r.err
}
