package results

import (
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
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

// ScenarioDoc says what the scenario called name is; "" for a name it
// does not know.
func ScenarioDoc(name string) string { return scenarioDocs[name] }

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
