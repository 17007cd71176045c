package layers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/vgpu-probe/vgpu-probe"

// The layers, top to bottom. cmd wires everything together; advise is
// the product's command that measures a user's program (over the apps
// suite of experiments); experiments runs the measurements (and may start the agent's parts and read its API
// through the profiler's client); profiler and agent are two roles that
// know nothing of each other; libhybridsync is the C library and the real GPU over
// hybridsync; base is what several roles share (formats, readers, the
// policy), and base packages import only each other.
const (
	cmd         = "cmd"
	advise      = "advise"
	experiments = "experiments"
	profiler    = "profiler"
	agent       = "agent"
	clib        = "libhybridsync"
	base        = "base"
)

// layerOf is the layer of each top-level directory.
var layerOf = map[string]string{
	"cmd":           cmd,
	"advise":        advise,
	"packaging":     cmd, // builds the packages and the image of what cmd builds
	"experiments":   experiments,
	"profiler":      profiler,
	"agent":         agent,
	"libhybridsync": clib,
	"hybridsync":    base, // the wait policy (C library, benchmark, guest)
	"hintpage":      base, // the hint page format (agent writes, hybridsync reads)
	"bpf":           base, // the agent's BPF objects
	"vmimages":      base, // guest images (experiments' libvirt backend, agent tests)
	"cgroups":       base, // a process's cgroups and a cgroup's CPU quota (hybridsync, agent)
	"proctree":      base, // a process's children, descendants, group and CPU in /proc (agent, apps, tests)
	"results":       base, // results.json, its Result/Step, the one writer, compare, apptable (apps' runs and paired table), stats
	"nvml":          base, // the NVML sampler and its file (agent, run, report)
	"input":         base, // bounded reading and number checks of inputs
	"layers":        base, // this test
	"internal":      base, // reexec (children of this binary), progress (the bar), test helpers (disturbance, schedtest, tmpfstest)
}

// layerOfPackage places a package whose role is not its directory's:
// the profiler's fixture builder lives with the fixtures it makes, but
// it is an experiment run (the NAMD-like workload beside co-runners).
// Nothing imports it (a command), so this adds no arrow into the
// profiler.
var layerOfPackage = map[string]string{
	"profiler/internal/mksample": experiments,
}

// mayImport lists, for each layer, the other layers it may import; every
// layer may import itself and base.
var mayImport = map[string][]string{
	cmd:         {advise, experiments, profiler, agent, clib},
	advise:      {experiments},
	experiments: {profiler, agent},
	profiler:    {},
	agent:       {},
	clib:        {},
	base:        {},
}

// testOnly allows a package's tests (not the package) to import packages
// under a path its layer may not: importer -> imported path prefixes.
var testOnly = map[string][]string{
	// The agent's wire format, decoded by the profiler, checked against
	// the agent's own encoder.
	"profiler/agentapi": {"agent/exporter", "agent/model", "agent/monitor"},
	// The load test reads the agent's responses with the profiler's client.
	"agent/exporter/loadtest": {"profiler/agentapi"},
	// Real cgroups with a CPU quota, made with the experiments' helper.
	"agent/hints":       {"experiments/cpucap"},
	"hybridsync/signal": {"experiments/cpucap"},
	// The C library under the apps suite's arms and co-runners.
	"libhybridsync/ctest": {"experiments/corunner", "experiments/apps/suite"},
}

type pkg struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// listPackages runs `go list -json` over the module; -e lists a package
// that does not build too (the build reports it), with its imports.
func listPackages(t *testing.T) []pkg {
	t.Helper()
	list := exec.Command("go", "list", "-e", "-json", module+"/...")
	var stderr bytes.Buffer
	list.Stderr = &stderr
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []pkg
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// TestImportLayers fails naming each import that goes against the table.
func TestImportLayers(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH to list the packages")
	}
	pkgs := listPackages(t)
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages: not the module", len(pkgs))
	}
	for _, p := range pkgs {
		from := strings.TrimPrefix(p.ImportPath, module+"/")
		for _, imp := range p.Imports {
			if err := check(from, imp, false); err != nil {
				t.Error(err)
			}
		}
		for _, imp := range slices.Concat(p.TestImports, p.XTestImports) {
			if err := check(from, imp, true); err != nil {
				t.Errorf("%v (in its tests)", err)
			}
		}
	}
}

// check says why from may not import imp, or nil if it may.
func check(from, imp string, test bool) error {
	rel, ok := strings.CutPrefix(imp, module+"/")
	if !ok {
		return nil // the standard library and other modules
	}
	lf, err := layer(from)
	if err != nil {
		return err
	}
	li, err := layer(rel)
	if err != nil {
		return err
	}
	if li == lf || li == base || slices.Contains(mayImport[lf], li) {
		return nil
	}
	if test && slices.ContainsFunc(testOnly[from], func(p string) bool { return under(rel, p) }) {
		return nil
	}
	return fmt.Errorf("%s (%s) imports %s (%s): %s may import only itself, base and %v (docs/architecture.md)",
		from, lf, rel, li, lf, mayImport[lf])
}

// layer is the layer of the package at rel, a path in the module.
func layer(rel string) (string, error) {
	for p, l := range layerOfPackage {
		if under(rel, p) {
			return l, nil
		}
	}
	top, _, _ := strings.Cut(rel, "/")
	l, ok := layerOf[top]
	if !ok {
		return "", fmt.Errorf("top-level directory %s has no layer: add it to layerOf in layers/layers_test.go and to docs/architecture.md", top)
	}
	return l, nil
}

// under reports whether path is prefix or a package below it.
func under(path, prefix string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// The checker itself: what the rules forbid is reported, with the
// offending import named; what they allow is not.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		from, imp string
		test      bool
		bad       string // "" when allowed
	}{
		{"cmd/vgpu-probe", "libhybridsync/cudadev", false, ""},
		{"cmd/vgpu-probe/advise", "advise", false, ""},
		{"advise", "experiments/apps/suite", false, ""},
		{"profiler/internal/mksample", "experiments/paper/workload", false, ""},
		{"experiments/apps/suite", "advise", false, "experiments/apps/suite (experiments) imports advise (advise)"},
		{"advise", "cmd/vgpu-probe/usage", false, "advise (advise) imports cmd/vgpu-probe/usage (cmd)"},
		{"profiler/report", "profiler/internal/mksample", false, "profiler/report (profiler) imports profiler/internal/mksample (experiments)"},
		{"experiments/paper/runner", "profiler/agentapi", false, ""},
		{"agent/hintfeed", "agent/hints", false, ""},
		{"profiler/report", "results", false, ""},
		{"hybridsync", "hintpage", false, ""},
		{"agent/monitor", "agent/bpfload", false, ""},
		{"profiler/agentapi", "agent/exporter", true, ""},
		{"hybridsync/signal", "experiments/cpucap", true, ""},
		{"experiments/paper/runner", "cmd/vgpu-probe/usage", false, "experiments/paper/runner (experiments) imports cmd/vgpu-probe/usage (cmd)"},
		{"profiler/report", "experiments/paper/workload", false, "profiler/report (profiler) imports experiments/paper/workload (experiments)"},
		{"agent/exporter", "profiler/nvml", false, "agent/exporter (agent) imports profiler/nvml (profiler)"},
		{"libhybridsync/cudadev", "experiments/paper/workload", false, "libhybridsync/cudadev (libhybridsync) imports experiments/paper/workload (experiments)"},
		{"results", "experiments/paper/workload", false, "results (base) imports experiments/paper/workload (experiments)"},
		{"profiler/agentapi", "agent/exporter", false, "profiler/agentapi (profiler) imports agent/exporter (agent)"},
		{"hybridsync", "experiments/corunner", true, "hybridsync (base) imports experiments/corunner"},
		{"newdir/x", "results", false, "top-level directory newdir has no layer"},
	} {
		err := check(tc.from, module+"/"+tc.imp, tc.test)
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%s -> %s (test %v): %v, want allowed", tc.from, tc.imp, tc.test, err)
		case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("%s -> %s (test %v): %v, want an error naming %q", tc.from, tc.imp, tc.test, err, tc.bad)
		}
	}
}

// hybridsyncOrder is hybridsync's packages by role, lowest first: the
// clock and the per-thread tables; the contention signals (and the one
// schedstat reader); the primitive and its engine; OpenMP's waits; the
// simulated GPU. Each imports only packages before it
// (docs/architecture.md, "hybridsync's packages").
var hybridsyncOrder = []string{"hybridsync/clock", "hybridsync/perthread", "hybridsync/signal", "hybridsync", "hybridsync/openmp", "hybridsync/simdev"}

// TestHybridsyncOrder fails naming each import inside hybridsync that
// goes up the order, and each hybridsync package the order leaves out. A
// package's tests may import anything (a signal's test may run a Syncer).
func TestHybridsyncOrder(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH to list the packages")
	}
	for _, p := range listPackages(t) {
		from := strings.TrimPrefix(p.ImportPath, module+"/")
		if from != "hybridsync" && !strings.HasPrefix(from, "hybridsync/") {
			continue
		}
		i := slices.Index(hybridsyncOrder, from)
		if i < 0 {
			t.Errorf("%s is not in hybridsyncOrder: place it", from)
			continue
		}
		for _, imp := range p.Imports {
			rel := strings.TrimPrefix(imp, module+"/")
			if j := slices.Index(hybridsyncOrder, rel); j >= i {
				t.Errorf("%s imports %s, which is not below it in hybridsyncOrder", from, rel)
			}
		}
	}
}
