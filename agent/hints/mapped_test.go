package hints

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
)

func idOf(t *testing.T, path string) FileID {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return fileID(&st)
}

// The dev and inode fields are matched, whatever the path says: a path
// that spells another file's fields, a line longer than the read buffer,
// anonymous and malformed lines.
func TestParseMaps(t *testing.T) {
	page := FileID{Dev: unix.Mkdev(0, 0x2f), Ino: 4242}
	big := FileID{Dev: unix.Mkdev(0x103, 0x12345), Ino: 1 << 40}
	other := FileID{Dev: unix.Mkdev(8, 1), Ino: 7}
	want := map[FileID]bool{page: true, big: true, other: true}
	long := strings.Repeat("x 00:2f 4242 ", 100)
	maps := "" +
		"55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 9 /usr/bin/qemu 00:2f 4242 (a path, not the fields)\n" +
		"7f0000000000-7f0000100000 rw-s 00000000 00:00 0 /dev/zero (deleted)\n" +
		"7f0000200000-7f0000300000 rw-s 00000000 103:12345 1099511627776 /" + long + "\n" +
		"garbage\n" +
		"7f0000400000-7f0000401000 rw-p 00000000 zz:01 4242 /bad/dev\n" +
		"7f0000500000-7f0000600000 rw-s 00000000 00:2f 4242 /dev/shm/vgpu-probe-hints-vm\n" +
		"7f0000600000-7f0000700000 rw-s 00000000 00:2f 4242 /dev/shm/vgpu-probe-hints-vm\n" +
		"7fff00000000-7fff00001000 r-xp 00000000 00:00 0                          [vdso]"
	got, err := parseMaps(strings.NewReader(maps), want)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []FileID{big, page}) {
		t.Errorf("found %v, want %v then %v, each once (not %v)", got, big, page, other)
	}
	if _, ok := mapsLineID([]byte("7f0000500000-7f0000600000 rw-s 00000000 00:2f")); ok {
		t.Error("a line without an inode parsed")
	}
}

// endless is a maps file that never ends, of 4 KB lines.
type endless struct{ off int }

var endlessLine = "7f0000000000-7f0000001000 r--p 00000000 08:01 9 /" + strings.Repeat("y", 4000) + "\n"

func (e *endless) Read(b []byte) (int, error) {
	n := copy(b, endlessLine[e.off:])
	e.off = (e.off + n) % len(endlessLine)
	return n, nil
}

// A maps file past the bound is not read to its end: it counts as
// unread.
func TestParseMapsBounded(t *testing.T) {
	_, err := parseMaps(&endless{}, map[FileID]bool{{Dev: 1, Ino: 1}: true})
	if !errors.Is(err, errTooLong) {
		t.Fatalf("endless maps: %v, want errTooLong", err)
	}
	_, err = parseMaps(io.MultiReader(strings.NewReader("a b c 00:01 5 /p\n"), errReader{}), map[FileID]bool{})
	if err == nil || errors.Is(err, errTooLong) {
		t.Fatalf("a read error: %v", err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, unix.EIO }

// runMapping starts a copy of sleep at path (its text is then a mapping
// of that file in the child) and waits until its maps show it.
func runMapping(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	src, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep")
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	id := idOf(t, path)
	for range 500 {
		m, _ := scanMaps("/proc", []FileID{id})
		if slices.Contains(m.By[id], cmd.Process.Pid) {
			return cmd
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the child's maps never showed its program")
	return nil
}

// holdForWriting starts a shell that keeps path open read-write (as QEMU
// keeps its memory-backend-file) without mapping it.
func holdForWriting(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", "-c", `exec 3<>"$1"; exec sleep 60`, "sh", path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	fd := fmt.Sprintf("/proc/%d/fd/3", cmd.Process.Pid)
	for range 500 {
		if l, err := os.Readlink(fd); err == nil && l == path {
			if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", cmd.Process.Pid)); strings.HasSuffix(exe, "sleep") {
				return cmd
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the child never held the file")
	return nil
}

// scanMaps finds another process's mapping of a file by its identity
// and never reports this process's own.
func TestScanMaps(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "prog")
	child := runMapping(t, path)
	id := idOf(t, path)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mine, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mine)
	m, err := scanMaps("/proc", []FileID{id, {Dev: id.Dev, Ino: id.Ino + 1}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.By[id], []int{child.Process.Pid}) || len(m.By) != 1 {
		t.Errorf("mappers %v, want only the child %d (not this process)", m.By, child.Process.Pid)
	}
	t.Logf("maps not read: %d", m.Unread)
}

// At start, what an earlier agent left goes, but for the pages another
// process maps or holds open for writing; directories, symlinks and
// other names stay.
func TestRemoveStale(t *testing.T) {
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, name) }
	write := func(name string) {
		if err := os.WriteFile(p(name), make([]byte, 4096), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("vgpu-probe-hints-gone")
	write(".vgpu-probe-hints-half.123")
	write("vgpu-probe-hints-written")
	write("other-file")
	runMapping(t, p("vgpu-probe-hints-mapped"))
	holdForWriting(t, p("vgpu-probe-hints-written"))
	if err := os.Mkdir(p("vgpu-probe-hints-dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(p("other-file"), p("vgpu-probe-hints-link")); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", p("vgpu-probe-hints-gone.sock"))
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()

	st, err := RemoveStale(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(st.Removed)
	if want := []string{".vgpu-probe-hints-half.123", "vgpu-probe-hints-gone", "vgpu-probe-hints-gone.sock"}; !slices.Equal(st.Removed, want) {
		t.Errorf("removed %v, want %v", st.Removed, want)
	}
	if len(st.Kept) != 2 || !strings.HasPrefix(st.Kept["vgpu-probe-hints-mapped"], "mapped by process") ||
		st.Kept["vgpu-probe-hints-written"] != "open for writing by another process" {
		t.Errorf("kept %q", st.Kept)
	}
	var left []string
	es, _ := os.ReadDir(dir)
	for _, e := range es {
		left = append(left, e.Name())
	}
	want := []string{"other-file", "vgpu-probe-hints-dir", "vgpu-probe-hints-link", "vgpu-probe-hints-mapped", "vgpu-probe-hints-written"}
	if !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
}

// withoutLease runs fn on a thread of its own without CAP_LEASE in its
// effective set (as under the unit), a thread the runtime then discards
// (capabilities are per thread).
func withoutLease(t *testing.T, fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			t.Error(err)
			return
		}
		data[unix.CAP_LEASE/32].Effective &^= 1 << (unix.CAP_LEASE % 32)
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			t.Error(err)
			return
		}
		fn()
	}()
	<-done
}

// A read lease is the owner's (or CAP_LEASE's): without CAP_LEASE, a page
// owned by another user (QEMU's) is asked about as root's and given back
// to its owner, whether another process writes it or not.
func TestOpenForWritingOtherOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another user")
	}
	dir := t.TempDir()
	for _, lease := range []bool{true, false} {
		for _, held := range []bool{false, true} {
			path := filepath.Join(dir, fmt.Sprint("page-", lease, held))
			if err := os.WriteFile(path, make([]byte, 4096), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(path, 4242, 4243); err != nil {
				t.Fatal(err)
			}
			var cmd *exec.Cmd
			if held {
				cmd = holdForWriting(t, path)
			}
			var w bool
			var err error
			ask := func() { w, err = openForWriting(pageFile{path: path, id: idOf(t, path)}) }
			if lease {
				ask()
			} else {
				withoutLease(t, ask)
			}
			if err != nil || w != held {
				t.Errorf("CAP_LEASE %v, held %v: open for writing %v, %v", lease, held, w, err)
			}
			var st unix.Stat_t
			unix.Stat(path, &st)
			if st.Uid != 4242 || st.Gid != 4243 || st.Mode&0o7777 != 0o600 {
				t.Errorf("CAP_LEASE %v, held %v: owner %d:%d mode %o after the question, want 4242:4243 0600", lease, held, st.Uid, st.Gid, st.Mode&0o7777)
			}
			if cmd != nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
		}
	}
}

// A VM's page that another process still has (QEMU maps it read-write)
// stays when its target goes and when the publisher closes; the next
// publisher writes into the same file; once nothing has it, it goes.
func TestPublisherKeepsPageInUse(t *testing.T) {
	dir := t.TempDir()
	newPub := func() *Publisher {
		p, err := New(Options{Dir: dir, Log: zerolog.Nop(),
			Owner: func(int) (int, int, error) { return os.Getuid(), os.Getgid(), nil }})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := newPub()
	p.Apply(added(targets.KindDomain, "vm", 10, 11))
	path := p.Path("vm")
	id := idOf(t, path)
	qemu := holdForWriting(t, path)

	p.Apply(targets.Event{Kind: targets.Removed, Target: targets.Target{Kind: targets.KindDomain, Name: "vm"}})
	p.reap() // what Run's reaper does (Apply only wakes it)
	if got := idOf(t, path); got != id {
		t.Fatalf("page replaced when its target went: %v, was %v", got, id)
	}
	p.Apply(added(targets.KindDomain, "vm", 10, 11, 12))
	p.Close()
	if got := idOf(t, path); got != id {
		t.Fatalf("page replaced at Close: %v, was %v", got, id)
	}

	// The next agent's publisher: the same inode, a fresh page.
	p = newPub()
	p.Apply(added(targets.KindDomain, "vm", 20, 21))
	if got := idOf(t, path); got != id {
		t.Fatalf("page re-created: %v, was %v", got, id)
	}
	f, err := hintpage.Map(path)
	if err != nil {
		t.Fatal(err)
	}
	if h := f.Header(); h.Slots != 2 || h.Flags&hintpage.FlagVCPU == 0 {
		t.Errorf("reopened page: %+v", h)
	}
	f.Close()

	qemu.Process.Kill()
	qemu.Wait()
	p.Close()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("page nobody uses still there after Close: %v", err)
	}
}

// Dropping a page never waits for the read of the processes' maps that
// tells whether its file may go (a tenth of a second per process with
// 65,000 mappings): Apply returns while that read is held up (a maps
// file that is a FIFO, which blocks its reader until the test writes
// it), and the file goes once the read is done.
func TestApplyDoesNotWaitForMaps(t *testing.T) {
	proc := t.TempDir()
	if err := os.Mkdir(filepath.Join(proc, "4242"), 0o755); err != nil {
		t.Fatal(err)
	}
	maps := filepath.Join(proc, "4242", "maps")
	if err := unix.Mkfifo(maps, 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{Dir: t.TempDir(), Log: zerolog.Nop(),
		Owner: func(int) (int, int, error) { return os.Getuid(), os.Getgid(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	p.proc = proc
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); p.Run(ctx) }()
	defer func() { cancel(); <-ran }()
	p.Apply(added(targets.KindPID, "app", os.Getpid()))
	path := p.Path("app")
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}

	applied := make(chan struct{})
	go func() {
		defer close(applied)
		p.Apply(targets.Event{Kind: targets.Removed, Target: targets.Target{Kind: targets.KindPID, Name: "app"}})
	}()
	// The FIFO opens for writing once the clean-up has it open to read.
	var w *os.File
	for deadline := time.Now().Add(time.Minute); w == nil; time.Sleep(5 * time.Millisecond) {
		if w, err = os.OpenFile(maps, os.O_WRONLY|unix.O_NONBLOCK, 0); err != nil && !errors.Is(err, unix.ENXIO) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("nothing read the maps after the page was dropped")
		}
	}
	select {
	case <-applied:
	case <-time.After(time.Minute):
		w.Close()
		t.Fatal("Apply waited for the read of a process's maps")
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("page removed before the maps were read: %v", err)
	}
	w.WriteString("00400000-00401000 r-xp 00000000 00:01 1 /bin/app\n")
	w.Close()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("page nobody maps still there after the maps were read")
		}
	}
}

// At start the agent removes only what vgpu-probe made: nothing from a
// directory another user may write (a tenant's files named as pages in a
// /dev/shm-like directory stay, and the directory is refused), and, in
// its own directory, not a page QEMU made itself (0644); an earlier
// agent's 0600 page nobody uses goes.
func TestRemoveStaleOnlyOurs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to plant another user's file")
	}
	shared := t.TempDir()
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	tenants := filepath.Join(shared, hintpage.FilePrefix+"real9")
	if err := os.WriteFile(tenants, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(tenants, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := RemoveStale(shared); err == nil {
		t.Error("RemoveStale took a directory any user may write")
	}
	if _, err := os.Stat(tenants); err != nil {
		t.Errorf("a tenant's file was removed: %v", err)
	}

	own := t.TempDir()
	qemus := filepath.Join(own, hintpage.FilePrefix+"qemu-made")
	ours := filepath.Join(own, hintpage.FilePrefix+"ours")
	for path, mode := range map[string]os.FileMode{qemus: 0o644, ours: 0o600} {
		if err := os.WriteFile(path, make([]byte, 4096), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	st, err := RemoveStale(own)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(qemus); err != nil || st.Kept[filepath.Base(qemus)] == "" {
		t.Errorf("a page vgpu-probe did not make (0644): %v, kept %v", err, st.Kept)
	}
	if _, err := os.Stat(ours); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an earlier agent's page nobody uses: %v, want removed", err)
	}
}
