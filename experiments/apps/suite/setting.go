package suite

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/results/apptable"
)

// Contention settings. Each of corunner.Contentions (none, while1, cap,
// cap+while1) runs the program on one CPU, --cpu; the same name with
// "xN" appended runs it on N CPUs, --cpu and the N-1 CPUs this process
// may use below it, as a VM of N vCPUs: the program's affinity is those
// N CPUs (its threads go where the scheduler puts them among them, as a
// guest's threads among its vCPUs), while1xN pins a busy loop on each of
// them (every vCPU has a busy neighbour), capxN allows N x --cap-quota
// per --cap-period, and nonexN is the program alone on the same N CPUs,
// the reference of the xN settings.
const ContentionHelp = "contention settings: none, while1, cap, cap+while1 on one CPU; with xN appended (nonex4, while1x4) on N CPUs, a busy loop pinned on each; a busy loop's pattern appended as -start, -late, -1s or -10s (while1x4-1s)"

// SettingsHelp says what each setting does, for apps' help.
const SettingsHelp = `  none        the program alone on one CPU (--cpu)
  while1      a busy-loop co-runner pinned to the same CPU
  cap         the program in a cgroup limited to --cap-quota per --cap-period
  cap+while1  both: capped program, uncapped co-runner outside its cgroup

or with xN appended (nonex4, while1x4) on N CPUs, --cpu and the N-1 below
it: the program's affinity is those CPUs, while1xN pins a busy loop on
each, capxN allows N quotas; nonexN is their reference. A suite entry's
"cpus": N runs it only under the settings on N CPUs.

A setting with busy loops may name when they run, appended:
  -start      in place before the program starts
  -late       from the program's ready line (a suite entry's "ready")
  -1s, -10s   from the start: on that long, off as long, and so on
Without one they start at the ready line of a program that has one (or
before the start with --contend-at-start), else before the start.`

// MaxSettingCPUs bounds N in a setting's "xN".
const MaxSettingCPUs = 1024

// setting is a contention setting's name taken apart.
type setting struct {
	Name string // as given: "while1x4"
	Base string // the setting on each CPU, one of corunner.Contentions
	CPUs int    // how many CPUs: 1, or N of "xN"
	// Pattern is how the busy loops come and go (apptable.Patterns; ""
	// none given).
	Pattern string
}

// parseSetting takes a setting's name apart; see ContentionHelp.
func parseSetting(name string) (setting, error) {
	rest, pattern := apptable.SplitPattern(name)
	s := setting{Name: name, Base: rest, CPUs: 1, Pattern: pattern}
	if i := strings.LastIndexByte(rest, 'x'); i > 0 && i < len(rest)-1 && corunner.ValidContention(rest[:i]) {
		n, err := strconv.Atoi(rest[i+1:])
		switch {
		case err != nil || rest[i+1] < '1' || rest[i+1] > '9':
			return s, fmt.Errorf("contention setting %q: want xN with a number of CPUs N, as in %sx4", name, rest[:i])
		case n == 1:
			return s, fmt.Errorf("contention setting %q: on one CPU it is %s", name, rest[:i])
		case n > MaxSettingCPUs:
			return s, fmt.Errorf("contention setting %q: at most %d CPUs", name, MaxSettingCPUs)
		}
		s.Base, s.CPUs = rest[:i], n
	}
	if !corunner.ValidContention(s.Base) {
		return s, fmt.Errorf("unknown setting %q (%s)", name, ContentionHelp)
	}
	if s.Pattern != "" && !strings.HasSuffix(s.Base, "while1") {
		return s, fmt.Errorf("contention setting %q: only a setting with busy loops has a pattern (%s)", name, ContentionHelp)
	}
	return s, nil
}

// scenario is the setting as the results document's cells name it: the
// setting on each CPU and the busy loops' pattern ("while1-1s"), apart
// from the CPUs, which the cell's VCPUs count. Two patterns of one
// setting are two rows of report's table, not one.
func (s setting) scenario() string {
	if s.Pattern == "" {
		return s.Base
	}
	return s.Base + "-" + s.Pattern
}

// period is how long the busy loops of a coming-and-going pattern stay
// on, and then off (0: they stay).
func (s setting) period() time.Duration {
	switch s.Pattern {
	case "1s":
		return time.Second
	case "10s":
		return 10 * time.Second
	}
	return 0
}

// settingOf is parseSetting for names already checked, or read from
// runs.jsonl: a name this build does not know counts as one CPU.
func settingOf(name string) setting {
	s, err := parseSetting(name)
	if err != nil {
		return setting{Name: name, Base: name, CPUs: 1}
	}
	return s
}

// Alone reports whether the setting called name runs the program alone
// (none, or nonexN): the reference of the settings on as many CPUs.
func Alone(name string) bool { return apptable.Alone(name) }

// aloneOn is the name of the setting alone on n CPUs.
func aloneOn(n int) string { return apptable.AloneOn(n) }

// sortSettings sorts setting names by their number of CPUs, then in the
// order of corunner.Contentions (apptable.SettingOrder); unknown names
// last, as they are.
func sortSettings(names []string) { apptable.SortSettings(names) }

// CheckSettings checks the names of --contention: each a setting, once.
func CheckSettings(names []string) error {
	seen := map[string]bool{}
	for _, n := range names {
		if _, err := parseSetting(n); err != nil {
			return fmt.Errorf("--contention: %w", err)
		}
		if seen[n] {
			return fmt.Errorf("--contention: %q given twice", n)
		}
		seen[n] = true
	}
	return nil
}

// cpusFor returns the n CPUs a setting on n CPUs runs on: c.CPU and the
// n-1 CPUs below it among those this process may use.
func (c *Config) cpusFor(n int) ([]int, error) {
	online, err := corunner.Online()
	if err != nil {
		return nil, err
	}
	i := slices.Index(online, c.CPU)
	if i < 0 {
		return nil, fmt.Errorf("--cpu %d: not one this process may use (%v)", c.CPU, online)
	}
	if i+1 < n {
		return nil, fmt.Errorf("a setting on %d CPUs needs --cpu and the %d CPUs below it, but this process may use %d CPUs up to CPU %d (%v)",
			n, n-1, i+1, c.CPU, online)
	}
	return slices.Clone(online[i+1-n : i+1]), nil
}

// runsUnder reports whether program p runs under the setting called
// name: a program made for a number of CPUs (Program.CPUs) runs only
// under the settings on that many.
func (p Program) runsUnder(name string) bool {
	return p.CPUs == 0 || settingOf(name).CPUs == p.CPUs
}

// checkPrograms checks that every program runs under some setting of
// --contention.
func (c *Config) checkPrograms() error {
	var none []string
	for _, p := range c.Programs {
		if !slices.ContainsFunc(c.Contention, p.runsUnder) {
			none = append(none, fmt.Sprintf("%s (on %d CPUs: %s, ...)", p.Name, p.CPUs, aloneOn(p.CPUs)))
		}
	}
	if len(none) == len(c.Programs) && len(none) > 0 {
		return errors.New("no program runs under these --contention settings: " + strings.Join(none, "; "))
	}
	return nil
}

// skipped says which programs run under only some of the settings (a
// line each), for the log.
func (c *Config) skipped() []string {
	var out []string
	for _, p := range c.Programs {
		var not []string
		for _, s := range c.Contention {
			if !p.runsUnder(s) {
				not = append(not, s)
			}
		}
		if len(not) > 0 {
			out = append(out, fmt.Sprintf("%s runs on %d CPUs (\"cpus\" in its suite): not under %s", p.Name, p.CPUs, strings.Join(not, ", ")))
		}
	}
	return out
}
