package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
	"github.com/vgpu-probe/vgpu-probe/internal/schedtest"
)

// unitFile is the systemd unit, relative to this package.
const unitFile = "../vgpu-probe-agent.service"

// nobody is the user of the watched process: another user than the agent.
const nobody = 65534

func capsOf(cs ...capability) CapSet {
	var s CapSet
	for _, c := range cs {
		s |= 1 << c.bit
	}
	return s
}

// Each feature names the capability it lacks, in one line, as a request
// error; with what it needs, or CAP_SYS_ADMIN for the eBPF programs, it
// passes.
func TestCheckPrivileges(t *testing.T) {
	all := capsOf(capBPF, capPerfmon, capChown, capDACOverride, capFowner, capSysNice)
	full := &Config{Hints: "/run/vgpu-probe/hints", LibvirtURI: "qemu:///system", Mitigate: "slice=100us"}
	for _, c := range []struct {
		name string
		o    *Config
		have CapSet
		want string // "" passes
	}{
		{"everything", full, all, ""},
		{"eBPF through CAP_SYS_ADMIN", &Config{}, capsOf(capSysAdmin), ""},
		{"no CAP_PERFMON", &Config{}, capsOf(capBPF), "loading the eBPF programs needs CAP_PERFMON (not in this process's effective set, or CAP_SYS_ADMIN on kernels before 5.8)"},
		{"no CAP_SYS_NICE", full, all &^ capsOf(capSysNice), "--mitigate needs CAP_SYS_NICE (not in this process's effective set)"},
		{"no CAP_CHOWN", full, all &^ capsOf(capChown), "--hints needs CAP_CHOWN (not in this process's effective set)"},
		{"no CAP_DAC_OVERRIDE", full, all &^ capsOf(capDACOverride), "--hints with --libvirt-uri needs CAP_DAC_OVERRIDE (not in this process's effective set)"},
		{"local pages only", &Config{Hints: "/run/vgpu-probe/hints"}, all &^ capsOf(capDACOverride, capFowner), ""},
		{"no feature asked", &Config{}, capsOf(capBPF, capPerfmon), ""},
	} {
		err := checkPrivileges(c.have, c.o.privileges())
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want == "":
		case err == nil:
			t.Errorf("%s: passed, want %q", c.name, c.want)
		case !errors.Is(err, ErrRequest) || !strings.HasPrefix(err.Error(), c.want) || strings.Contains(err.Error(), "\n"):
			t.Errorf("%s: got %q, want a one-line request error starting %q", c.name, err, c.want)
		}
	}
}

// Run refuses before it changes or loads anything.
func TestRunRefusesMissingCapability(t *testing.T) {
	o := &Config{PIDs: []int{os.Getpid()}, Listen: "127.0.0.1:0", Window: time.Minute, Once: time.Second,
		Mitigate: "slice=100us", Out: &bytes.Buffer{}, Log: zerolog.Nop(),
		Geteuid:      func() int { return 0 },
		Capabilities: func() (CapSet, error) { return capsOf(capBPF, capPerfmon), nil },
		LoadProbe: func(bpfload.Options) (*bpfload.Probe, error) {
			t.Fatal("probe loaded without the capabilities --mitigate needs")
			return nil, nil
		}}
	err := Run(context.Background(), o)
	if !errors.Is(err, ErrRequest) || !strings.Contains(err.Error(), "CAP_SYS_NICE") {
		t.Fatalf("got %v, want a request error naming CAP_SYS_NICE", err)
	}
}

// effectiveCaps reads this process's set: root in a test has CAP_BPF or
// CAP_SYS_ADMIN; anyone else, whatever it has, gets no error.
func TestEffectiveCaps(t *testing.T) {
	s, err := effectiveCaps()
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 && !s.has(capSysAdmin) && !s.has(capBPF) {
		t.Errorf("root with neither CAP_SYS_ADMIN nor CAP_BPF: %#x", s)
	}
}

// unitCaps reads the unit's CapabilityBoundingSet as systemd does for
// plain lists: lines add up, an empty assignment clears.
func unitCaps(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var caps []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "CapabilityBoundingSet=")
		if !ok {
			continue
		}
		if strings.HasPrefix(v, "~") {
			t.Fatalf("%s: an inverted CapabilityBoundingSet= (%s) is not read here", unitFile, v)
		}
		if v == "" {
			caps = nil
		}
		caps = append(caps, strings.Fields(v)...)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(caps) == 0 {
		t.Fatalf("%s: no CapabilityBoundingSet=", unitFile)
	}
	return caps
}

// boundingArg is setpriv's --bounding-set for caps: none but those.
func boundingArg(caps []string) string {
	s := "-all"
	for _, c := range caps {
		s += ",+" + strings.ToLower(strings.TrimPrefix(c, "CAP_"))
	}
	return s
}

// needsRootAndSetpriv skips a test of the agent as the unit runs it.
func needsRootAndSetpriv(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("runs the agent under the unit's capability set as root: needs root")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv (util-linux) not installed: cannot limit the capability set")
	}
}

// buildAgent builds vgpu-probe into a temporary directory.
func buildAgent(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to build vgpu-probe")
	}
	bin := filepath.Join(t.TempDir(), "vgpu-probe")
	out, err := exec.Command(gobin, "build", "-o", bin, "github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// asUnit is the agent with exactly caps, as root: what the unit runs.
func asUnit(ctx context.Context, bin string, caps []string, args ...string) *exec.Cmd {
	a := append([]string{"--bounding-set", boundingArg(caps), "--inh-caps=-all", bin, "agent"}, args...)
	return exec.CommandContext(ctx, "setpriv", a...)
}

// busyAsNobody starts a busy loop owned by nobody; it is killed at the
// end of the test.
func busyAsNobody(t *testing.T) int {
	t.Helper()
	busy := exec.Command("setpriv", fmt.Sprintf("--reuid=%d", nobody), fmt.Sprintf("--regid=%d", nobody), "--clear-groups",
		"/bin/sh", "-c", "while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Process.Kill(); busy.Wait() })
	// setpriv changes its user, then execs the shell.
	for range 500 {
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", busy.Process.Pid)); err == nil &&
			regexp.MustCompile(`(?m)^Uid:\s+65534\s`).Match(st) {
			return busy.Process.Pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the busy loop never became nobody's")
	return 0
}

func threadsOf(t *testing.T, pid int) []int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	var tids []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids
}

// slices reads every thread's sched_runtime.
func slicesOf(t *testing.T, pid int) map[int]uint64 {
	t.Helper()
	out := map[int]uint64{}
	for _, tid := range threadsOf(t, pid) {
		out[tid] = schedtest.Runtime(t, tid)
	}
	return out
}

// pageState says what is wrong with pid's page, "" when it is nobody's,
// mode 0600 and holds the thread's slot.
func pageState(path string, pid int) string {
	fi, err := os.Stat(path)
	if err != nil {
		return err.Error()
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o600 || st.Uid != nobody || st.Gid != nobody {
		return fmt.Sprintf("mode %v owner %d:%d, want 0600 %d:%d", fi.Mode().Perm(), st.Uid, st.Gid, nobody, nobody)
	}
	p, err := hintpage.Map(path)
	if err != nil {
		return err.Error()
	}
	defer p.Close()
	var s hintpage.Slot
	if err := p.FindTID(pid, &s); err != nil {
		return fmt.Sprintf("no slot of thread %d: %v", pid, err)
	}
	if s.PublishNs == 0 {
		return "slot never published"
	}
	return ""
}

// The agent as the unit runs it (root, the unit's capability bounding
// set, nothing inheritable), built once for both cases.
func TestUnitCapabilities(t *testing.T) {
	needsRootAndSetpriv(t)
	caps := unitCaps(t)
	bin := buildAgent(t)
	t.Run("every feature", func(t *testing.T) { testEveryFeature(t, bin, caps) })
	t.Run("without CAP_SYS_NICE", func(t *testing.T) { testWithoutCapability(t, bin, caps) })
}

// Watching another user's process with --hints and --mitigate, the agent
// exits 0, the page is that user's, 0600 and written, and the slice was
// set on the target's threads and put back.
func testEveryFeature(t *testing.T, bin string, caps []string) {
	if _, err := mitigate.Check(mitigate.System, uint64(100*time.Microsecond)); err != nil {
		t.Skipf("custom EEVDF slices not available here (--mitigate cannot work): %v", err)
	}
	pid := busyAsNobody(t)
	busyBeside(t, pid) // contended: the agent gives it the slice
	before := slicesOf(t, pid)

	// A directory like the agent's own: root's, 0711.
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	agent := asUnit(ctx, bin, caps, "--pid", strconv.Itoa(pid), "--hints", dir, "--mitigate", "slice=100us", "--once", "3s", "--json")
	agent.Stdout, agent.Stderr = &stdout, &stderr
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- agent.Wait() }()

	// While it measures: the page and the slices.
	page := filepath.Join(dir, hintpage.FileName(strconv.Itoa(pid)))
	pageWrong, sliceWrong := "not looked at", "not looked at"
	var err error
	for done := false; !done && (pageWrong != "" || sliceWrong != ""); {
		pageWrong = pageState(page, pid)
		sliceWrong = ""
		for tid, rt := range slicesOf(t, pid) {
			if rt != uint64(100*time.Microsecond) {
				sliceWrong = fmt.Sprintf("thread %d has sched_runtime %d ns, want 100000", tid, rt)
			}
		}
		select {
		case err = <-exited:
			done = true
		case <-time.After(20 * time.Millisecond):
		}
	}
	if pageWrong != "" || sliceWrong != "" {
		t.Errorf("while the agent ran: page: %s; slice: %s", pageWrong, sliceWrong)
	}
	if err == nil {
		err = <-exited
	}
	if err != nil {
		t.Fatalf("agent under %v: %v\n%s", caps, err, stderr.String())
	}
	var snap struct{ Targets []struct{ Name string } }
	if err := json.Unmarshal(stdout.Bytes(), &snap); err != nil || len(snap.Targets) != 1 || snap.Targets[0].Name != strconv.Itoa(pid) {
		t.Errorf("snapshot: %v %+v\n%s", err, snap, stdout.String())
	}
	for _, bad := range []string{"panic", " ERR ", " WRN "} {
		if strings.Contains(stderr.String(), bad) {
			t.Errorf("the agent's log holds %q:\n%s", bad, stderr.String())
		}
	}
	if after := slicesOf(t, pid); !mapsEqual(after, before) {
		t.Errorf("slices after the agent: %v, before: %v", after, before)
	}
	if _, err := os.Stat(page); !os.IsNotExist(err) {
		t.Errorf("page left behind after the agent exited: %v", err)
	}
}

func mapsEqual(a, b map[int]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// With a capability of the unit's set taken away, the feature that needs
// it is refused at start: exit 2, one line naming it.
func testWithoutCapability(t *testing.T, bin string, caps []string) {
	if !slices.Contains(caps, "CAP_SYS_NICE") {
		t.Fatalf("the unit lacks CAP_SYS_NICE, which --mitigate needs: %v", caps)
	}
	pid := busyAsNobody(t)
	before := slicesOf(t, pid)
	less := slices.DeleteFunc(slices.Clone(caps), func(c string) bool { return c == "CAP_SYS_NICE" })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	agent := asUnit(ctx, bin, less, "--pid", strconv.Itoa(pid), "--mitigate", "slice=100us", "--once", "1s")
	agent.Stderr = &stderr
	err := agent.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("got %v, want exit status 2\n%s", err, stderr.String())
	}
	msg := strings.TrimSuffix(stderr.String(), "\n")
	if strings.Contains(msg, "\n") || !strings.Contains(msg, "--mitigate needs CAP_SYS_NICE") {
		t.Errorf("stderr %q: want one line saying --mitigate needs CAP_SYS_NICE", stderr.String())
	}
	if after := slicesOf(t, pid); !mapsEqual(after, before) {
		t.Errorf("a refused agent changed slices: %v, before %v", after, before)
	}
}

// The unit's exposure, as systemd-analyze scores it, stays at most 3.5
// (6.4 before the unit was hardened).
func TestUnitSecurityScore(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze not installed: cannot score the unit")
	}
	out, err := exec.Command("systemd-analyze", "security", "--offline=true", "--no-pager", unitFile).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in:\n%s", out)
	}
	score, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	if score > 3.5 {
		t.Errorf("exposure %.1f, want at most 3.5:\n%s", score, out)
	}
	t.Logf("exposure %.1f", score)
}

// The unit keeps every capability a feature checks for (caps.go), and
// only those (and CAP_SYS_RESOURCE, for the BPF maps' memlock on kernels
// before 5.11, which no check can tell).
func TestUnitCapabilitiesAreChecked(t *testing.T) {
	inUnit := map[string]bool{}
	for _, c := range unitCaps(t) {
		inUnit[c] = true
	}
	checked := map[string]bool{"CAP_SYS_RESOURCE": true}
	for _, p := range (&Config{Hints: "x", LibvirtURI: "x", Mitigate: "x"}).privileges() {
		for _, c := range p.need {
			checked[c.name] = true
			if !inUnit[c.name] {
				t.Errorf("%s needs %s, which the unit's CapabilityBoundingSet lacks", p.feature, c.name)
			}
		}
	}
	for c := range inUnit {
		if !checked[c] {
			t.Errorf("the unit keeps %s, which no feature needs", c)
		}
	}
}

// allCaps plays a process with every capability, for tests of what comes
// after the check.
func allCaps() (CapSet, error) { return ^CapSet(0), nil }
