package kubernetes

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// maxImageBytes is the image's budget: the agent's binary and glibc.
const maxImageBytes = 60 << 20

// podman runs podman with its own storage under dir, so the test neither
// sees nor leaves images in the host's. cgroupfs: a CI container has no
// systemd to ask for a scope. runc where present: crun refuses hosts that
// mount cgroup v1 controllers with a v2 hierarchy beside them ("cgroups in
// hybrid mode not supported").
func podman(dir string) func(args ...string) *exec.Cmd {
	base := []string{"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "runroot"),
		"--storage-driver", "vfs", "--cgroup-manager", "cgroupfs", "--events-backend", "file"}
	if _, err := exec.LookPath("runc"); err == nil {
		base = append(base, "--runtime", "runc")
	}
	return func(args ...string) *exec.Cmd {
		return exec.Command("podman", append(append([]string{}, base...), args...)...)
	}
}

// runFlags turns the DaemonSet's pod into podman's flags: its PID
// namespace, user, capabilities, seccomp profile, privilege escalation,
// root filesystem, memory limit, and its host paths, each under host
// instead of the host's root (the host's own /run/vgpu-probe belongs to an
// agent the host may run).
func runFlags(t *testing.T, m manifest, host string) []string {
	t.Helper()
	spec := m.ds.Spec.Template.Spec
	c := m.agent(t)
	sc := c.SecurityContext
	var f []string
	if spec.HostPID {
		f = append(f, "--pid", "host")
	}
	if sc.RunAsUser != nil {
		f = append(f, "--user", fmt.Sprintf("%d:%d", *sc.RunAsUser, *sc.RunAsGroup))
	}
	for _, d := range sc.Capabilities.Drop {
		f = append(f, "--cap-drop", strings.ToLower(string(d)))
	}
	for _, a := range sc.Capabilities.Add {
		f = append(f, "--cap-add", string(a))
	}
	if sc.Privileged != nil && *sc.Privileged {
		f = append(f, "--privileged")
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		f = append(f, "--security-opt", "no-new-privileges")
	}
	if sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeUnconfined {
		f = append(f, "--security-opt", "seccomp=unconfined")
	}
	if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		f = append(f, "--read-only")
	}
	if lim, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		f = append(f, "--memory", strconv.FormatInt(lim.Value(), 10))
	}
	for _, vm := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name != vm.Name || v.HostPath == nil {
				continue
			}
			src := filepath.Join(host, v.HostPath.Path)
			if err := os.MkdirAll(src, 0o755); err != nil { // DirectoryOrCreate
				t.Fatal(err)
			}
			opt := "rw"
			if vm.ReadOnly {
				opt = "ro"
			}
			f = append(f, "-v", src+":"+vm.MountPath+":"+opt)
		}
	}
	// podman's default open-files limit (1048576) can be above the test's
	// own hard limit, and its processes limit above what the runtime may
	// set in a CI container (runc: "error setting rlimit type 6: operation
	// not permitted" even at the process's own limit): the test's soft
	// open-files limit, and 4096 processes, far more than the agent's
	// threads.
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil {
		f = append(f, "--ulimit", fmt.Sprintf("nofile=%d:%d", rl.Cur, rl.Cur))
	}
	f = append(f, "--ulimit", "nproc=4096:4096")
	return f
}

// TestImageRunsAsDaemonSet: `make image`, loaded into podman, run with
// exactly the DaemonSet's capabilities, security settings, memory limit
// and host paths, its agent watching a real process on the host: it
// serves that process's series on /metrics and writes its hint page into
// the host directory. The image stays within its size budget.
func TestImageRunsAsDaemonSet(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agent loads eBPF programs (.ci/run runs the tests as root)")
	}
	if _, err := exec.LookPath("podman"); err != nil {
		t.Skip("podman not installed (.ci/setup-packaging.sh installs it)")
	}
	m := loadManifest(t)
	c := m.agent(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "pkg")
	mk := exec.Command("make", "-s", "image", "BUILD="+filepath.Join(dir, "build"), "BIN="+filepath.Join(dir, "vgpu-probe"), "PKG_OUT="+out)
	mk.Dir = filepath.Join(here(), "..", "..")
	if b, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, b)
	}
	archives, _ := filepath.Glob(filepath.Join(out, "*.oci.tar"))
	if len(archives) != 1 {
		t.Fatalf("make image wrote %v, want one .oci.tar", archives)
	}
	// podman refuses a run root path over 50 characters: a short one.
	pdir, err := os.MkdirTemp("", "pm")
	if err != nil {
		t.Fatal(err)
	}
	pm := podman(pdir)
	t.Cleanup(func() {
		// Whatever the test left running, then the storage.
		pm("rm", "-f", "-a").Run()
		pm("system", "reset", "-f").Run()
		os.RemoveAll(pdir)
	})
	b, err := pm("load", "-q", "-i", archives[0]).CombinedOutput()
	if err != nil {
		t.Fatalf("podman load: %v\n%s", err, b)
	}
	_, image, _ := strings.Cut(strings.TrimSpace(string(b)), "Loaded image: ")
	if !strings.HasSuffix(image, "/"+c.Image) {
		t.Fatalf("podman load: %q, want the manifest's image %s", b, c.Image)
	}
	b, err = pm("image", "inspect", image).Output()
	if err != nil {
		t.Fatalf("podman image inspect %s: %v", image, err)
	}
	var info []struct{ Size int64 }
	if err := json.Unmarshal(b, &info); err != nil || len(info) != 1 {
		t.Fatalf("podman image inspect: %v\n%s", err, b)
	}
	t.Logf("image %s: %.1f MB", image, float64(info[0].Size)/1e6)
	if info[0].Size > maxImageBytes {
		t.Errorf("image is %d bytes, over its %d", info[0].Size, maxImageBytes)
	}

	target := exec.Command("sleep", "300")
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { target.Process.Kill(); target.Wait() })
	pid := strconv.Itoa(target.Process.Pid)
	// The manifest's arguments, watching the process instead of
	// discovering VMs (there are none here), on a loopback port of the
	// kernel's choosing (the agent logs it), with hint pages in the
	// mounted directory.
	var args []string
	for i := 0; i < len(c.Args); i++ {
		switch c.Args[i] {
		case "--discover":
			args = append(args, "--pid", pid)
		case "--listen":
			args = append(args, "--listen", "127.0.0.1:0")
			i++
		default:
			args = append(args, c.Args[i])
		}
	}
	args = append(args, "--hints", "/run/vgpu-probe/hints")
	host := filepath.Join(dir, "host")
	run := append(append([]string{"run", "-d", "--name", "agent", "--network", "host"}, runFlags(t, m, host)...), image)
	b, err = pm(append(run, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("podman %s: %v\n%s", strings.Join(append(run, args...), " "), err, b)
	}
	page := filepath.Join(host, "run", "vgpu-probe", "hints", "vgpu-probe-hints-"+pid)
	deadline := time.Now().Add(60 * time.Second)
	listening := regexp.MustCompile(`serving /metrics.* listen=(\S+)`)
	addr, body := "", ""
	for ; time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if st, _ := pm("inspect", "-f", "{{.State.Running}}", "agent").Output(); strings.TrimSpace(string(st)) != "true" {
			logs, _ := pm("logs", "agent").CombinedOutput()
			t.Fatalf("the agent's container stopped:\n%s", logs)
		}
		if addr == "" {
			logs, _ := pm("logs", "agent").CombinedOutput()
			if m := listening.FindSubmatch(logs); m != nil {
				addr = string(m[1])
			}
			continue
		}
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			continue
		}
		all, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(all)
		if fi, err := os.Stat(page); err == nil && fi.Size() > 0 && strings.Contains(body, `domain="`+pid+`"`) {
			return
		}
	}
	logs, _ := pm("logs", "agent").CombinedOutput()
	_, perr := os.Stat(page)
	t.Fatalf("after 60 s: serving on %q; page %s: %v; /metrics has the target's series: %v\nagent's log:\n%s",
		addr, page, perr, strings.Contains(body, `domain="`+pid+`"`), logs)
}
