package hybridsync

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"
)

// refTiming is a plain float re-implementation of the dictionary's average,
// kept independent of Timing.next on purpose.
type refTiming struct {
	n         int
	mean, dev float64
}

func (r *refTiming) add(x float64) {
	r.n++
	if r.n == 1 {
		r.mean = x
		return
	}
	w := float64(min(r.n, window))
	d := x - r.mean
	r.mean += d / w
	r.dev += (math.Abs(d) - r.dev) / w
}

// mutexDict is the reference the lock-free dictionary is checked against.
type mutexDict struct {
	mu sync.Mutex
	m  map[KernelID]*refTiming
}

func (d *mutexDict) update(k KernelID, x int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.m[k]
	if r == nil {
		r = &refTiming{}
		d.m[k] = r
	}
	r.add(float64(x))
}

func TestDictMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	d := NewDict(64)
	ref := &mutexDict{m: map[KernelID]*refTiming{}}
	for range 20000 {
		k := KernelID(1 + rng.IntN(40))
		x := int64(1000 + rng.IntN(1_000_000))
		d.Update(k, x)
		ref.update(k, x)
	}
	for k, r := range ref.m {
		got, ok := d.Lookup(k)
		if !ok {
			t.Fatalf("kernel %d missing", k)
		}
		// Integer division loses under 1 ns per update; allow for the
		// accumulated truncation.
		if math.Abs(float64(got.Mean)-r.mean) > 2*window || math.Abs(float64(got.Dev)-r.dev) > 2*window {
			t.Errorf("kernel %d: got mean %d dev %d, reference %.0f %.0f", k, got.Mean, got.Dev, r.mean, r.dev)
		}
	}
}

// TestDictConcurrent hammers shared and private kernels from 16 goroutines
// (run with -race): every kernel is found, counts saturate correctly and
// each mean stays within the values written for it.
func TestDictConcurrent(t *testing.T) {
	d := NewDict(256)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for i := range 5000 {
				k := KernelID(1 + i%8) // shared by everyone
				d.Update(k, int64(1000+rng.IntN(1000)))
				d.Update(KernelID(100+g), 5000) // private
			}
		}()
	}
	wg.Wait()
	for k := KernelID(1); k <= 8; k++ {
		got, ok := d.Lookup(k)
		if !ok || got.N != maxSamples || got.Mean < 1000 || got.Mean >= 2000 {
			t.Errorf("shared kernel %d: %+v ok=%v", k, got, ok)
		}
	}
	for g := range 16 {
		if got, _ := d.Lookup(KernelID(100 + g)); got.Mean != 5000 || got.Dev != 0 {
			t.Errorf("private kernel %d: %+v", 100+g, got)
		}
	}
}

func TestDictBounded(t *testing.T) {
	d := NewDict(4)
	for k := KernelID(1); k <= 10; k++ {
		d.Update(k, 100)
	}
	if d.Len() != 4 || d.Dropped() != 6 {
		t.Errorf("len %d dropped %d, want 4 and 6", d.Len(), d.Dropped())
	}
	if _, ok := d.Lookup(0); ok {
		t.Error("kernel 0 must never be known")
	}
}

func TestPackSaturates(t *testing.T) {
	got := unpack(pack(Timing{Mean: 1 << 40, Dev: 1 << 30, N: 1000}))
	if got.Mean != maxMean || got.Dev != maxDev || got.N != maxSamples {
		t.Errorf("saturation: %+v", got)
	}
	if got := unpack(pack(Timing{Mean: -5, Dev: -1, N: -1})); got != (Timing{}) {
		t.Errorf("negative values: %+v", got)
	}
}

// FuzzDict applies arbitrary update sequences: no panic, the dictionary
// never holds more than its capacity, and every mean lies within the values
// written for its kernel.
func FuzzDict(f *testing.F) {
	f.Add([]byte{1, 0, 0, 10, 2, 255, 255, 255, 1, 0, 0, 20})
	f.Add([]byte{3, 0, 200, 0, 131, 0, 0, 10, 131, 0, 0, 10, 131, 0, 0, 10, 3, 0, 0, 50})
	f.Fuzz(func(t *testing.T, ops []byte) {
		d := NewDict(8)
		lo, hi := map[KernelID]int64{}, map[KernelID]int64{}
		for i := 0; i+4 <= len(ops); i += 4 {
			k := KernelID(ops[i] % 16)
			x := int64(ops[i+1])<<16 | int64(ops[i+2])<<8 | int64(ops[i+3])
			if i%8 == 4 {
				x = -x
			}
			if ops[i] >= 128 {
				// A wait that slept and found the work done: an upper
				// bound, and three in a row forget the timing.
				if e := d.find(k, false); e != nil {
					e.overslept(x)
				}
			} else {
				d.Update(k, x)
			}
			if _, ok := lo[k]; !ok || x < lo[k] {
				lo[k] = x
			}
			if _, ok := hi[k]; !ok || x > hi[k] {
				hi[k] = x
			}
		}
		if d.Len() > 8 {
			t.Fatalf("len %d over capacity", d.Len())
		}
		d.each(func(k KernelID, e *entry) {
			got := unpack(e.timing.Load())
			if got.N == 0 {
				return // forgotten
			}
			if got.Mean < max(lo[k], 0) || got.Mean > max(hi[k], 0) {
				t.Fatalf("kernel %d mean %d outside [%d, %d]", k, got.Mean, lo[k], hi[k])
			}
		})
	})
}

func FuzzConfigFromEnv(f *testing.F) {
	f.Add("hybrid", "10000", "debug")
	f.Add("paper", "inf", "")
	f.Add("x", "-1", "loud")
	f.Fuzz(func(t *testing.T, mode, spin, log string) {
		env := map[string]string{EnvMode: mode, EnvMaxSpin: spin, EnvLog: log}
		c, err := ConfigFromEnv(func(k string) string { return env[k] })
		if err == nil && (c.MaxSpin < 0 || c.Mode.String() == "") {
			t.Fatalf("accepted bad config %+v", c)
		}
	})
}
