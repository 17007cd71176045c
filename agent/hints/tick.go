package hints

import (
	"bufio"
	"compress/gzip"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// kernelTickNs returns the scheduler tick of the running kernel (1 s /
// CONFIG_HZ) from its build configuration (/proc/config.gz, or
// /boot/config-RELEASE), or 0 when neither is there.
//
// A runqueue whose CPU bandwidth quota runs out is throttled at the next
// update of its runtime, which for a thread that runs on is the next tick:
// a quota run ends at the first tick after the quota is spent, not when it
// is spent. With HZ=250 that is up to 4 ms later, 40% of a 10 ms quota.
func kernelTickNs() uint64 {
	var r io.Reader
	if f, err := os.Open("/proc/config.gz"); err == nil {
		defer f.Close()
		if z, err := gzip.NewReader(f); err == nil {
			r = z
		}
	}
	if r == nil {
		var u unix.Utsname
		if unix.Uname(&u) != nil {
			return 0
		}
		f, err := os.Open("/boot/config-" + unix.ByteSliceToString(u.Release[:]))
		if err != nil {
			return 0
		}
		defer f.Close()
		r = f
	}
	return tickFromConfig(r)
}

func tickFromConfig(r io.Reader) uint64 {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CONFIG_HZ="); ok {
			hz, err := strconv.ParseUint(v, 10, 32)
			if err != nil || hz < 24 || hz > 10000 {
				return 0
			}
			return 1_000_000_000 / hz
		}
	}
	return 0
}

// tickPhase learns where in the tick period the quota throttles of one
// thread happen (the tick, plus the switch that follows it): the phase
// most of the latest throttles agree on. Throttles that do not come at a
// tick (at a switch-in of an overdrawn runqueue, or at another update of
// its runtime) fall outside and are outvoted.
type tickPhase struct {
	at [16]uint64 // throttle times mod the tick
	n  int
}

func (p *tickPhase) add(at, tick uint64) {
	p.at[p.n%len(p.at)] = at % tick
	p.n++
}

// phase returns the phase of the throttles in [0, tick) and whether at
// least half of the latest ones (and at least 3) agree on it within a
// twentieth of a tick.
func (p *tickPhase) phase(tick uint64) (uint64, bool) {
	n := min(p.n, len(p.at))
	if n < 3 || tick == 0 {
		return 0, false
	}
	win := tick / 20
	// circular distance on [0, tick)
	dist := func(a, b uint64) uint64 {
		d := max(a, b) - min(a, b)
		return min(d, tick-d)
	}
	best, bestN := uint64(0), 0
	for i := range n {
		c := 0
		for j := range n {
			if dist(p.at[i], p.at[j]) <= win {
				c++
			}
		}
		if c > bestN {
			best, bestN = p.at[i], c
		}
	}
	if 2*bestN < n {
		return 0, false
	}
	// Mean of the agreeing ones, as offsets from best (may wrap).
	var sum int64
	for j := range n {
		if dist(best, p.at[j]) <= win {
			d := int64(p.at[j]) - int64(best)
			if d > int64(tick/2) {
				d -= int64(tick)
			} else if d < -int64(tick/2) {
				d += int64(tick)
			}
			sum += d
		}
	}
	ph := (int64(best) + sum/int64(bestN) + int64(tick)) % int64(tick)
	return uint64(ph), true
}
