package runstate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// DefaultDir is the state directory: the unit's RuntimeDirectory.
const DefaultDir = "/run/vgpu-probe"

// HeldError: another live agent owns what was asked for.
type HeldError struct {
	What string // "hints directory /dev/shm", "process 1234"
	PID  int    // the owner, 0 when it had not yet written its pid
}

func (e *HeldError) Error() string {
	if e.PID <= 0 {
		return fmt.Sprintf("%s is owned by another vgpu-probe agent", e.What)
	}
	return fmt.Sprintf("%s is owned by another vgpu-probe agent (pid %d)", e.What, e.PID)
}

// Lock is a held lock file.
type Lock struct {
	f    *os.File
	path string
}

// Acquire takes dir/name.lock for this process without waiting; a lock
// another process holds is a *HeldError naming it.
func Acquire(dir, name, what string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	path := filepath.Join(dir, name+".lock")
	for {
		f, ok, err := lockPath(path)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, &HeldError{What: what, PID: ownerPID(path)}
		}
		if f == nil {
			continue // removed by its last owner meanwhile: a new file
		}
		pid := strconv.Itoa(os.Getpid()) + "\n"
		if _, err := f.WriteAt([]byte(pid), 0); err == nil {
			_ = f.Truncate(int64(len(pid)))
		}
		// A lock whose pid could not be written (a full /run) still
		// excludes others; they just cannot name its owner.
		return &Lock{f: f, path: path}, nil
	}
}

// lockPath opens path and takes its flock without waiting: ok false when
// another process holds it; f nil with ok true when the file was removed
// (by the owner releasing it) between the open and the lock, so that the
// lock taken is on a file nobody else will find: the caller tries again.
func lockPath(path string) (f *os.File, ok bool, err error) {
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, false, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("lock %s: %w", path, err)
	}
	if !samePath(f, path) {
		f.Close()
		return nil, true, nil
	}
	return f, true, nil
}

// samePath reports whether path still names the open file f.
func samePath(f *os.File, path string) bool {
	var a, b unix.Stat_t
	if unix.Fstat(int(f.Fd()), &a) != nil || unix.Stat(path, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

func ownerPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// Release removes the lock file and drops the lock (removed first, so
// that nobody takes a lock on a file about to go).
func (l *Lock) Release() {
	if l == nil || l.f == nil {
		return
	}
	os.Remove(l.path)
	l.f.Close()
	l.f = nil
}

// Sweep removes the lock files in dir that no live process holds: those
// of agents that died. Locks are taken again as files of the same name
// by whoever next asks.
func Sweep(dir string) {
	paths, _ := filepath.Glob(filepath.Join(dir, "*.lock"))
	for _, p := range paths {
		f, ok, err := lockPath(p)
		if err != nil || !ok || f == nil {
			continue
		}
		os.Remove(p)
		f.Close()
	}
}

// DirLockName is the lock name of a directory: by device and inode, so
// that two paths to one directory (a symlink, a bind mount) are one lock.
func DirLockName(kind, dir string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s-%d-%d", kind, st.Dev, st.Ino), nil
}

// ProcessLockName is the lock name of a process: its pid and start time,
// so that a pid the kernel reuses is another process.
func ProcessLockName(pid int) (string, error) {
	start, err := StartTime(pid)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("proc-%d-%d", pid, start), nil
}

// StartTime is when a thread (or process) started, in clock ticks since
// boot (/proc/TID/stat field 22): with the tid, it names one thread across
// pid reuse.
func StartTime(tid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command (field 2) may hold spaces and parentheses: fields are
	// counted from the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command", tid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): field 22 is f[19].
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", tid, len(f)+2)
	}
	return strconv.ParseUint(f[19], 10, 64)
}
