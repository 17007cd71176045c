package simdev

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/hybridsync/clock"
)

// TestCompletesOnTimeWhateverTheHost: the kernel completes at launch +
// duration even when the host thread does not look for a while, and a
// blocking wait returns only after completion.
func TestCompletesOnTimeWhateverTheHost(t *testing.T) {
	d := New(1)
	ev := d.Launch(0, 2*time.Millisecond)
	done, _ := ev.CompletedAt()
	if got := done - ev.LaunchedAt(); got != int64(2*time.Millisecond) {
		t.Fatalf("completion %d ns after launch, want 2 ms", got)
	}
	if ok, _ := ev.Query(); ok {
		t.Fatal("complete right after launch")
	}
	time.Sleep(5 * time.Millisecond) // the host thread is busy elsewhere
	if ok, err := ev.Query(); !ok || err != nil {
		t.Fatalf("not complete 5 ms into a 2 ms kernel: %v %v", ok, err)
	}
	ev2 := d.Launch(0, time.Millisecond)
	if err := ev2.Wait(); err != nil {
		t.Fatal(err)
	}
	if done, _ := ev2.CompletedAt(); clock.Now() < done {
		t.Fatal("Wait returned before completion")
	}
}

func TestStreamsSerialize(t *testing.T) {
	d := New(2)
	a := d.Launch(0, time.Millisecond)
	b := d.Launch(0, time.Millisecond) // queued behind a
	c := d.Launch(1, time.Millisecond) // another stream: concurrent with a
	ad, _ := a.CompletedAt()
	bd, _ := b.CompletedAt()
	cd, _ := c.CompletedAt()
	if bd-ad != int64(time.Millisecond) {
		t.Errorf("same stream: second kernel done %d ns after the first, want 1 ms", bd-ad)
	}
	if cd >= bd {
		t.Errorf("other stream waited for stream 0")
	}
}

func TestErrorsAndInterruptDelay(t *testing.T) {
	d := New(1)
	d.InterruptDelay = 3 * time.Millisecond
	boom := errors.New("boom")
	ev := d.LaunchFailing(0, 0, boom)
	start := clock.Now()
	if err := ev.Wait(); err != boom {
		t.Fatalf("Wait = %v, want the kernel's error", err)
	}
	if clock.Now()-start < int64(3*time.Millisecond) {
		t.Error("blocking wait did not pay the interrupt delay")
	}
	if ok, err := ev.Query(); !ok || err != boom {
		t.Errorf("Query = %v %v", ok, err)
	}
}

func TestJitterStaysInBounds(t *testing.T) {
	p := Fixed("k", 500*time.Microsecond, 0.05)
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range 1000 {
		_, d := p.At(i, rng)
		if d < 475*time.Microsecond || d > 525*time.Microsecond {
			t.Fatalf("draw %v outside 500µs ± 5%%", d)
		}
	}
}

func TestParseProfile(t *testing.T) {
	p, err := ParseProfile("# NAMD-ish\nnonbonded 500us 3%\n\nbonded 120us\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []Kernel{{"nonbonded", 500 * time.Microsecond, 0.03}, {"bonded", 120 * time.Microsecond, 0}}
	if len(p.Kernels) != 2 || p.Kernels[0] != want[0] || p.Kernels[1] != want[1] {
		t.Errorf("parsed %+v", p.Kernels)
	}
	for _, bad := range []string{"", "# only a comment", "k", "k -5us", "k 0s", "k 500us 3", "k 500us 150%", "k 1h", "k 1us 1% extra"} {
		if _, err := ParseProfile(bad); err == nil {
			t.Errorf("ParseProfile(%q) accepted", bad)
		} else if strings.Contains(err.Error(), "\n") {
			t.Errorf("error for %q spans lines: %q", bad, err)
		}
	}
}

func FuzzParseProfile(f *testing.F) {
	f.Add("nonbonded 500us 3%\nbonded 120us\n")
	f.Add("k 1ms 0%")
	f.Fuzz(func(t *testing.T, text string) {
		p, err := ParseProfile(text)
		if err != nil {
			return
		}
		for _, k := range p.Kernels {
			if k.Duration <= 0 || k.Duration > maxDuration || k.Jitter < 0 || k.Jitter >= 1 || k.Name == "" {
				t.Fatalf("accepted bad kernel %+v", k)
			}
		}
	})
}
