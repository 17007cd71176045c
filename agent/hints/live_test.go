package hints

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
)

// livePeer is a helper process: it reads commands from stdin and answers
// each on stdout: "hints PATH" (does a HintSource on the page get its live
// array?), "dial PATH" (what a raw connection to a socket gets).
func livePeer() int {
	fmt.Printf("pid %d\n", os.Getpid())
	sc := bufio.NewScanner(os.Stdin)
	var keep []*signal.HintSource // held: their connections stay open
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		switch cmd {
		case "hints":
			h := signal.NewHintSource(arg, nil, nil)
			keep = append(keep, h)
			fmt.Printf("live %v\n", h.LiveArray())
		case "dial":
			fmt.Println(dial(arg))
		}
	}
	runtime.KeepAlive(keep)
	return 0
}

// dial connects to a live socket and says what came: "fd", "refused" (the
// connection closed with nothing), or the error.
func dial(path string) string {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		if strings.Contains(err.Error(), "permission denied") {
			return "denied"
		}
		return "error " + err.Error()
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	b, oob := make([]byte, 64), make([]byte, 64)
	n, oobn, _, _, err := c.ReadMsgUnix(b, oob)
	if n == 0 && oobn == 0 {
		return "refused"
	}
	if oobn > 0 {
		return "fd"
	}
	return fmt.Sprintf("data %d %v", n, err)
}

type peer struct {
	cmd *exec.Cmd
	pid int
	in  io.WriteCloser
	out *bufio.Scanner
}

func startPeer(t *testing.T, uid uint32) *peer {
	t.Helper()
	// A copy of the test binary that the other user can run.
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755) // t.TempDir's parent is 0700
	exe := filepath.Join(dir, "peer")
	b, err := os.ReadFile(os.Args[0])
	if err == nil {
		err = os.WriteFile(exe, b, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "VGPU_PROBE_LIVE_PEER=1")
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	}
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &peer{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	if !p.out.Scan() {
		t.Fatal("peer did not start")
	}
	fmt.Sscanf(p.out.Text(), "pid %d", &p.pid)
	return p
}

func (p *peer) ask(t *testing.T, cmd string) string {
	t.Helper()
	fmt.Fprintln(p.in, cmd)
	if !p.out.Scan() {
		t.Fatalf("peer: no answer to %q", cmd)
	}
	return p.out.Text()
}

// TestLiveArrayIsolation: two targets get two live arrays; each target's
// process gets its own array over its page's socket, and nothing else:
// another process of the same user is refused, and so is a process of
// another user (by the socket's mode, and by its credentials once the
// mode is opened); with the array, the process's thread is registered to
// it, and unregistered when the process lets go.
func TestLiveArrayIsolation(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: loads the eBPF programs, runs a peer as another user")
	}
	probe, err := bpfload.Load(bpfload.Options{Events: true, Log: zerolog.Nop()})
	if err != nil {
		t.Skipf("cannot load the eBPF programs here: %v", err)
	}
	defer probe.Close()
	dir := t.TempDir()
	os.Chmod(dir, 0o755) // the other user's peer must reach its page
	os.Chmod(filepath.Dir(dir), 0o755)
	pub, err := New(Options{Dir: dir, Log: zerolog.Nop(), Counters: probe})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	const nobody = 65534
	a, b := startPeer(t, 0), startPeer(t, nobody)
	for _, pr := range []*peer{a, b} {
		if err := probe.Watch(uint32(pr.pid)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tg := range []targets.Target{
		{Kind: targets.KindPID, Name: "a", Threads: []targets.Thread{{TID: a.pid, VCPU: -1}}},
		{Kind: targets.KindPID, Name: "b", Threads: []targets.Thread{{TID: b.pid, VCPU: -1}}},
	} {
		pub.Apply(targets.Event{Kind: targets.Added, Target: tg})
	}
	pa, pb := pub.Path("a"), pub.Path("b")
	pub.mu.Lock()
	la, lb := pub.pages["pid/a"].live, pub.pages["pid/b"].live
	pub.mu.Unlock()
	if la == nil || lb == nil || la.arr.ID == lb.arr.ID {
		t.Fatalf("live arrays: %+v %+v", la, lb)
	}
	var st unix.Stat_t
	if err := unix.Stat(pb+hintpage.SockSuffix, &st); err != nil || st.Uid != nobody || st.Mode&0o777 != 0o600 {
		t.Fatalf("b's socket: %v uid %d mode %o", err, st.Uid, st.Mode&0o777)
	}

	// The agent writes both live blocks until the processes hold their
	// arrays: the refresh keeps its short period.
	if got := pub.refreshPeriod(); got != RefreshEvery {
		t.Errorf("refresh every %v before any array was mapped, want %v", got, RefreshEvery)
	}

	// Outsiders first.
	if got := dial(pa + hintpage.SockSuffix); got != "refused" {
		t.Errorf("another root process on a's socket: %s", got)
	}
	if got := b.ask(t, "dial "+pa+hintpage.SockSuffix); got != "denied" {
		t.Errorf("another user on a's socket (0600): %s", got)
	}
	os.Chmod(pa+hintpage.SockSuffix, 0o666)
	if got := b.ask(t, "dial "+pa+hintpage.SockSuffix); got != "refused" {
		t.Errorf("another user on a's socket (opened to all): %s", got)
	}
	if got := a.ask(t, "dial "+pb+hintpage.SockSuffix); got != "denied" && got != "refused" {
		t.Errorf("a's process on b's socket: %s", got)
	}
	if _, _, refused := pub.LiveStats(); refused < 2 {
		t.Errorf("%d refusals counted", refused)
	}

	// The targets' own processes.
	if got := a.ask(t, "hints "+pa); got != "live true" {
		t.Errorf("a on its page: %s", got)
	}
	if got := b.ask(t, "hints "+pb); got != "live true" {
		t.Errorf("b on its page: %s", got)
	}
	for _, pr := range []*peer{a, b} {
		// The publisher registers the threads just after it sends the
		// array: the peer may have mapped it and answered first.
		h, err := probe.HintSlot(uint32(pr.pid))
		for end := time.Now().Add(time.Second); err != nil && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
			h, err = probe.HintSlot(uint32(pr.pid))
		}
		if err != nil {
			t.Fatalf("pid %d not registered: %v", pr.pid, err)
		}
		want := la.arr.ID
		if pr == b {
			want = lb.arr.ID
		}
		if h.Target != want {
			t.Errorf("pid %d registered to array %d, want %d", pr.pid, h.Target, want)
		}
	}
	if mapped, served, _ := pub.LiveStats(); mapped != 2 || served != 2 {
		t.Errorf("mapped %d served %d", mapped, served)
	}
	// Every live block in an array: the refresh only keeps the
	// estimates fresh, at the long period.
	if got := pub.refreshPeriod(); got != RefreshMappedEvery {
		t.Errorf("refresh every %v with every live block mapped, want %v", got, RefreshMappedEvery)
	}
	// a lets go (exits): its thread goes back to the page.
	select {
	case <-pub.kick: // the threads' assignment's
	default:
	}
	a.in.Close()
	a.cmd.Wait()
	deadline := time.Now().Add(2 * time.Second)
	for {
		if mapped, _, _ := pub.LiveStats(); mapped == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a's thread still registered after its process left")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := probe.HintSlot(uint32(a.pid)); err == nil {
		t.Error("a's registration is still in the map")
	}
	// a's live block is the agent's again: the short period, and Run
	// told so.
	if got := pub.refreshPeriod(); got != RefreshEvery {
		t.Errorf("refresh every %v after a let go, want %v", got, RefreshEvery)
	}
	select {
	case <-pub.kick:
	default:
		t.Error("the refresh was not told that a live block came back")
	}
}
