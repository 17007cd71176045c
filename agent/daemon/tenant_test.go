package daemon

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/discover/discovertest"
	"github.com/vgpu-probe/vgpu-probe/agent/model"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
	"github.com/vgpu-probe/vgpu-probe/internal/schedtest"
)

// The agent attacked by an unprivileged local user (nobody) who starts
// programs named like every hypervisor, with their vCPU thread names
// and identity flags, while the agent runs --discover --hints
// --mitigate, as the unit can.

// tenantFakes starts one fake of every hypervisor kind as the tenant,
// one of them named like the root VM the test starts next (audit2), and
// returns their threads.
func tenantFakes(t *testing.T) []int {
	t.Helper()
	var tids []int
	for _, f := range []struct {
		exe, threads string
		args         []string
	}{
		{"qemu-system-x86_64", "CPU %d/KVM", []string{"-name", "guest=audit2,debug-threads=on"}},
		{"qemu-kvm", "CPU %d/KVM", []string{"-name", "guest=ns_vmi,debug-threads=on"}},
		{"kvm", "CPU %d/KVM", []string{"-id", "100", "-name", "pve,debug-threads=on"}},
		{"qemu-system-aarch64", "CPU %d/TCG", []string{"-name", "arm,debug-threads=on", "-qmp", "unix:/root/priv.sock,server=on,wait=off"}},
		{"firecracker", "fc_vcpu %d", []string{"--id", "fc-gpu-1"}},
		{"cloud-hypervisor", "vcpu%d", []string{"--api-socket", "path=/run/ch/ch.sock"}},
		{"crosvm", "crosvm_vcpu%d", []string{"run", "--socket", "/run/crosvm/cv.sock", "vmlinux"}},
	} {
		cmd := discovertest.Start(t, discovertest.TenantStandIn(t, discovertest.Tenant, f.exe), discovertest.Tenant, f.threads, 3, f.args...)
		tids = append(tids, threadsOf(t, cmd.Process.Pid)...)
	}
	return tids
}

// Fakes of every kind run by an unprivileged user get no target, no
// page and no slice, and the first one named audit2 takes neither the
// name, the page file nor the label of root's VM audit2 started after
// it, which gets all three.
func TestTenantFakesGetNothing(t *testing.T) {
	needAgent(t)
	fakes := tenantFakes(t)
	// Root's VM runs, and a busy loop competes with a vCPU of it: the
	// agent's --mitigate gives the slice only to contended threads.
	root := discovertest.BusyStandIn(t, "qemu-system-x86_64", "CPU %d/KVM", 2, "-name", "guest=audit2,debug-threads=on")
	rootVCPUs := slices.DeleteFunc(threadsOf(t, root.Process.Pid), func(tid int) bool { return tid == root.Process.Pid })
	busyBeside(t, rootVCPUs[0])
	before := slicesOfTIDs(t, fakes)
	dir := t.TempDir()

	type result struct {
		snap model.Snapshot
		err  error
	}
	done := make(chan result, 1)
	go func() {
		snap, err := once(t, &Config{Discover: true, Hints: dir, Mitigate: "slice=100us", StateDir: t.TempDir()}, 5*time.Second)
		done <- result{snap, err}
	}()
	var r result
	rootSliced, rootPage := false, false
	page := filepath.Join(dir, hintpage.FileName("audit2"))
	for ran := true; ran; {
		select {
		case r = <-done:
			ran = false
		case <-time.After(100 * time.Millisecond):
		}
		if got := slicesOfTIDs(t, fakes); !slices.Equal(got, before) {
			t.Fatalf("the tenant's threads %v got slices %v (had %v)", fakes, got, before)
		}
		rootSliced = rootSliced || schedtest.Runtime(t, rootVCPUs[0]) == slice100
		if names := dirNames(t, dir); ran && len(names) > 1 {
			t.Fatalf("hint pages %v: want root's audit2 only", names)
		}
		var st unix.Stat_t
		if unix.Stat(page, &st) == nil {
			if st.Uid != 0 {
				t.Fatalf("audit2's page belongs to uid %d, want root's", st.Uid)
			}
			rootPage = true
		}
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	vm := domainIn(r.snap, "audit2")
	if vm == nil || len(vm.Threads) != 2 || !slices.Contains(rootVCPUs, vm.Threads[0].TID) {
		t.Fatalf("domain audit2 %+v, want root's VM with vCPU threads %v", vm, rootVCPUs)
	}
	for _, tg := range r.snap.Targets {
		for _, th := range tg.Threads {
			if slices.Contains(fakes, th.TID) {
				t.Errorf("target %q watches the tenant's thread %d", tg.Name, th.TID)
			}
		}
	}
	if !rootPage {
		t.Errorf("no page %s for root's VM audit2", page)
	}
	if !rootSliced {
		t.Errorf("root's VM never had the slice: the test did not see mitigation work")
	}
}

// After kill -9 of a mitigating agent, a start that does not mitigate
// (agent --pid X --once 2s) puts back X's slices.
func TestAgentWithoutMitigateRestoresKilledAgentsSlices(t *testing.T) {
	needAgent(t)
	state := t.TempDir()
	pids := contended(t, 1)
	before := schedtest.Runtime(t, pids[0])
	a := runAgent(t, pids, "100us", "", state)
	a.waitSlices(t, slice100, pids...)
	a.cmd.Process.Kill()
	<-a.exited
	if got := schedtest.Runtime(t, pids[0]); got != slice100 {
		t.Fatalf("slice %d after SIGKILL: the test needs the killed agent's slice left", got)
	}
	b := runAgent(t, pids, "none", "", state, envAgentOnce+"=2s")
	select {
	case <-b.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("agent --once 2s still running:\n%s", b.stderr.String())
	}
	if code := b.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("agent --pid --once exit status %d:\n%s", code, b.stderr.String())
	}
	if got := schedtest.Runtime(t, pids[0]); got != before {
		t.Errorf("slice %d after agent --pid %d --once 2s, want the original %d:\n%s", got, pids[0], before, b.stderr.String())
	}
}

// footprint is what a running agent holds: its resident memory, the
// series it serves, its open files, and the files in its hints directory.
type footprint struct {
	rssKB, series, fds, pages int
}

func footprintOf(t *testing.T, a *agentProc, addr, hints string) footprint {
	t.Helper()
	var f footprint
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scraping the agent: %v\n%s", err, a.stderr.String())
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		// The agent's own process and Go runtime series are its
		// health, not its targets': they are the same count whatever
		// it watches.
		if l := sc.Text(); l != "" && !strings.HasPrefix(l, "#") {
			f.series++
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", a.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f.rssKB, _ = strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", a.cmd.Process.Pid))
	f.fds = len(fds)
	f.pages = len(dirNames(t, hints))
	return f
}

// settledFootprint is footprintOf over three scans (2 s apart), with
// the median of its resident memory.
func settledFootprint(t *testing.T, a *agentProc, addr, hints string) footprint {
	t.Helper()
	var fs []footprint
	for i := range 3 {
		if i > 0 {
			time.Sleep(2 * time.Second)
		}
		fs = append(fs, footprintOf(t, a, addr, hints))
	}
	rss := []int{fs[0].rssKB, fs[1].rssKB, fs[2].rssKB}
	slices.Sort(rss)
	f := fs[2]
	f.rssKB = rss[1]
	return f
}

// 500 untrusted fakes, each with two threads named like vCPUs, leave the
// agent's series, files and pages as they were and its memory within 5%
// (the same fakes of a trusted user would make 500 targets, 1,000 vCPU
// series and 500 pages).
func TestManyUntrustedFakesCostNothing(t *testing.T) {
	needAgent(t)
	if testing.Short() {
		t.Skip("starts 500 processes (-short)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	hints := t.TempDir()
	a := runAgent(t, nil, "100us", hints, t.TempDir(), envAgentDiscover+"=1", envAgentListen+"="+addr)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent does not serve on %s:\n%s", addr, a.stderr.String())
		}
	}
	time.Sleep(3 * time.Second) // a scan
	base := settledFootprint(t, a, addr, hints)

	exe := discovertest.TenantStandIn(t, discovertest.Tenant, "qemu-system-x86_64")
	for i := range 500 {
		discovertest.Start(t, exe, discovertest.Tenant, "CPU %d/KVM", 2, "-name", fmt.Sprintf("guest=fake-%d,debug-threads=on", i))
	}
	time.Sleep(3 * time.Second) // a scan of them all
	with := settledFootprint(t, a, addr, hints)
	if float64(with.rssKB) > 1.05*float64(base.rssKB) {
		// The heap of a race-detector build swings with its collections:
		// measure once more before calling it growth.
		t.Logf("resident memory %d kB -> %d kB: measuring again", base.rssKB, with.rssKB)
		with = settledFootprint(t, a, addr, hints)
	}
	t.Logf("agent without fakes %+v, with 500: %+v", base, with)
	// An open file or two comes and goes with the scrape's connection.
	if with.series != base.series || with.pages != base.pages || with.fds > base.fds+2 {
		t.Errorf("500 untrusted fakes: series %d -> %d, pages %d -> %d, open files %d -> %d; want them unchanged",
			base.series, with.series, base.pages, with.pages, base.fds, with.fds)
	}
	if float64(with.rssKB) > 1.05*float64(base.rssKB) {
		t.Errorf("resident memory %d kB -> %d kB with 500 untrusted fakes: more than 5%%", base.rssKB, with.rssKB)
	}
	if got := dirNames(t, hints); len(got) != 0 {
		t.Errorf("pages %v for untrusted fakes", got)
	}
	a.stop(t)
}
