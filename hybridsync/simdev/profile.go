package simdev

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Kernel is one entry of a profile.
type Kernel struct {
	Name     string
	Duration time.Duration
	// Jitter is the relative spread of the duration: each launch draws
	// uniformly from Duration*(1±Jitter). The paper measured 2-5% for NAMD.
	Jitter float64
}

// Profile is the sequence of kernels a workload launches, cycled step by
// step.
type Profile struct {
	Kernels []Kernel
}

// Fixed is a profile of one kernel.
func Fixed(name string, d time.Duration, jitter float64) Profile {
	return Profile{Kernels: []Kernel{{Name: name, Duration: d, Jitter: jitter}}}
}

// Mixed is the built-in mixed-duration profile: a short, a NAMD-sized and a
// long kernel per three steps, each with 3% jitter, so the dictionary must
// keep kernels apart.
var Mixed = Profile{Kernels: []Kernel{
	{Name: "short", Duration: 50 * time.Microsecond, Jitter: 0.03},
	{Name: "nonbonded", Duration: 500 * time.Microsecond, Jitter: 0.03},
	{Name: "long", Duration: 2 * time.Millisecond, Jitter: 0.03},
}}

// At returns the kernel of step i and its duration, drawn with rng.
func (p Profile) At(i int, rng *rand.Rand) (Kernel, time.Duration) {
	k := p.Kernels[i%len(p.Kernels)]
	d := k.Duration
	if k.Jitter > 0 {
		d = time.Duration(float64(d) * (1 + k.Jitter*(2*rng.Float64()-1)))
	}
	return k, d
}

// Profile limits: longer kernels or more of them are almost certainly a
// typo, and would make a benchmark step take minutes.
const (
	maxKernels  = 1024
	maxDuration = 10 * time.Second
)

// ParseProfile parses the text form of a profile: one kernel per line,
// "NAME DURATION [JITTER%]", e.g. "nonbonded 500us 3%". Blank lines and
// lines starting with # are ignored.
func ParseProfile(text string) (Profile, error) {
	var p Profile
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := parseKernel(line)
		if err != nil {
			return Profile{}, fmt.Errorf("line %d: %w", n, err)
		}
		if len(p.Kernels) == maxKernels {
			return Profile{}, fmt.Errorf("line %d: more than %d kernels", n, maxKernels)
		}
		p.Kernels = append(p.Kernels, k)
	}
	if err := sc.Err(); err != nil {
		return Profile{}, err
	}
	if len(p.Kernels) == 0 {
		return Profile{}, errors.New("no kernels (want lines of NAME DURATION [JITTER%])")
	}
	return p, nil
}

func parseKernel(line string) (Kernel, error) {
	f := strings.Fields(line)
	if len(f) < 2 || len(f) > 3 {
		return Kernel{}, fmt.Errorf("%q: want NAME DURATION [JITTER%%]", line)
	}
	d, err := time.ParseDuration(f[1])
	if err != nil || d <= 0 || d > maxDuration {
		return Kernel{}, fmt.Errorf("duration %q: want a positive duration up to %v, like 500us", f[1], maxDuration)
	}
	k := Kernel{Name: f[0], Duration: d}
	if len(f) == 3 {
		j, err := strconv.ParseFloat(strings.TrimSuffix(f[2], "%"), 64)
		if err != nil || !strings.HasSuffix(f[2], "%") || j < 0 || j >= 100 {
			return Kernel{}, fmt.Errorf("jitter %q: want a percentage in [0, 100), like 3%%", f[2])
		}
		k.Jitter = j / 100
	}
	return k, nil
}
