package results

import (
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/results/apptable"
)

// Name is the results document's file name in a command's output
// directory.
const Name = "results.json"

// Kinds of results file: the command that wrote it.
const (
	KindRun   = "run"
	KindBench = "bench"
	KindApps  = "apps"
)

// ReferenceScenario is the scenario whose cells are the reference of a
// file of kind: run's baseline (the runner alone), bench's and apps' none
// (the program alone on its CPU); "" for an unknown kind.
func ReferenceScenario(kind string) string {
	switch kind {
	case KindRun, "":
		return "baseline"
	case KindBench, KindApps:
		return "none"
	}
	return ""
}

// Reference is the scenario whose cells are f's reference.
func (f *File) Reference() string { return ReferenceScenario(f.Kind) }

// scenarioDocs say what each scenario name means: Table I's for run,
// the contention settings for bench and apps.
var scenarioDocs = map[string]string{
	"shared1":    "runner and co-runner VMs share the same CPUs, no isolation",
	"shared2":    "as shared1, with CPU bandwidth control giving each VM a fair share",
	"baseline":   "the runner alone with half the vCPUs, on dedicated CPUs",
	"none":       "the program alone on its CPUs",
	"while1":     "a busy-loop co-runner pinned to each of the program's CPUs",
	"cap":        "the program in a cgroup with a CPU bandwidth limit",
	"cap+while1": "both: capped program, uncapped busy-loop co-runner outside its cgroup",
}

// patternDocs say how the busy loops of a setting with a pattern
// (apps' and advise's while1-1s) come and go.
var patternDocs = map[string]string{
	"start": "there before the program starts",
	"late":  "from the program's ready line",
	"1s":    "on for 1 s, off for 1 s, from the start",
	"10s":   "on for 10 s, off for 10 s, from the start",
}

// ScenarioDoc says what the scenario called name is, with its busy
// loops' pattern where it has one; "" for a name it does not know.
func ScenarioDoc(name string) string {
	base, pattern := apptable.SplitPattern(name)
	doc := scenarioDocs[base]
	if doc == "" || pattern == "" {
		return doc
	}
	return doc + ", " + patternDocs[pattern]
}

// ThisMachine describes the machine this process runs on.
func ThisMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU()}
	m.Hostname, _ = os.Hostname()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = strings.TrimRight(string(u.Release[:]), "\x00")
	}
	return m
}
