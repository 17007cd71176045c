package discover

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/vgpu-probe/vgpu-probe/agent/discover/discovertest"
)

// qmpRaceWindow is how long the swap race runs: the 60 s in which the
// agent, checking the path and then dialling it by name, connected 20
// times to a root-only socket at its own pace. Here the scanner asks as
// fast as it can, so the window holds thousands of tries.
const qmpRaceWindow = 60 * time.Second

// A trusted user who may rename a directory on its VM's -qmp path swaps
// it, as fast as it can, with a symbolic link to a root-only directory
// holding a root-only listening socket of the same name, while the
// scanner asks QMP again and again: not one connection reaches the
// root-only socket. The VM's own socket (served by the test, so the peer
// check refuses it after the connection) is reached, and the link is
// seen and refused, so the race was run.
func TestQMPPathSwapRace(t *testing.T) {
	needRoot(t)
	priv := filepath.Join(t.TempDir(), "priv") // in root's 0700 test directory
	if err := os.Mkdir(priv, 0o700); err != nil {
		t.Fatal(err)
	}
	privConns, _ := listenUnix(t, filepath.Join(priv, "qmp.sock"))

	base, dir := tenantQMPDir(t)
	sock := filepath.Join(dir, "qmp.sock")
	vmConns, _ := listenUnix(t, sock)
	if err := os.Chmod(sock, 0o666); err != nil { // the VM's user may connect
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(priv, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, discovertest.Tenant, discovertest.Tenant); err != nil {
		t.Fatal(err)
	}
	exe := discovertest.TenantStandIn(t, 0, "qemu-system-x86_64") // a root-owned executable
	discovertest.Start(t, exe, discovertest.Tenant, "worker %d", 2,
		"-name", "race", "-qmp", "unix:"+sock+",server=on,wait=off")
	discovertest.Swapper(t, discovertest.Tenant, dir, link)

	logs := newLineCounter("may not search", "not by the VM's process")
	trust := Trust{UIDs: []uint32{0, discovertest.Tenant}}
	s := NewScanner(Options{Trust: &trust, Log: zerolog.New(logs)})
	scans := askQMPFor(t, s, qmpRaceWindow)

	t.Logf("%d scans: %d connections to the VM's socket, %d to the root-only one; refused: %v", scans, vmConns.Load(), privConns.Load(), logs.counts())
	if n := privConns.Load(); n != 0 {
		t.Errorf("%d connections to a root-only socket through a swapped directory", n)
	}
	if vmConns.Load() == 0 {
		t.Errorf("no connection to the VM's own socket: the race was not run")
	}
	if logs.counts()[0] == 0 {
		t.Errorf("the swapped-in link was never seen: the race was not run")
	}
}

// tenantQMPDir makes a directory of the tenant's (base) holding the
// directory of a VM's socket (dir), both the tenant's, as a user keeps
// its VM's QMP socket.
func tenantQMPDir(t *testing.T) (base, dir string) {
	t.Helper()
	base, err := os.MkdirTemp("", "qmp-race-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	dir = filepath.Join(base, "vm")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{base, dir} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, discovertest.Tenant, discovertest.Tenant); err != nil {
			t.Fatal(err)
		}
	}
	return base, dir
}

// askQMPFor scans for d with the scanner's clock an hour further at each
// scan, past every wait before QMP is asked again, so that each scan
// asks; it returns how many scans it made.
func askQMPFor(t *testing.T, s *Scanner, d time.Duration) int {
	t.Helper()
	ahead := time.Duration(0)
	s.now = func() time.Time { return time.Now().Add(ahead) }
	n := 0
	for end := time.Now().Add(d); time.Now().Before(end); n++ {
		ahead += time.Hour
		if _, err := s.Scan(); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// lineCounter is a log writer that counts the lines holding each of want
// (a race's thousands of lines are not kept).
type lineCounter struct {
	want []string
	mu   sync.Mutex
	n    []int
}

func newLineCounter(want ...string) *lineCounter {
	return &lineCounter{want: want, n: make([]int, len(want))}
}

func (l *lineCounter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, w := range l.want {
		if strings.Contains(string(b), w) {
			l.n[i]++
		}
	}
	return len(b), nil
}

func (l *lineCounter) counts() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.n...)
}
