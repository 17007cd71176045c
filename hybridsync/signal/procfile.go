package signal

import (
	"bytes"
	"errors"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// procFile is a small kernel file the wait path reads again and again: a
// thread's schedstat, a cgroup's cpu.stat. Its path is converted for the
// system call once, and the readers below parse in place, so a sample
// allocates nothing. (The agent reads the same files through
// prometheus/procfs, which allocates as it reads and parses: fine every
// few seconds, not every few ms on every waiting thread.)
type procFile struct {
	path *byte // NUL-terminated; nil: a path that cannot be opened
}

func newProcFile(path string) procFile {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return procFile{} // a NUL in the path: read fails
	}
	return procFile{path: p}
}

// read reads up to len(buf) bytes from the start of the file. The system
// calls are raw: unix.Read tells the race detector about buf, which makes
// buf escape to the heap in race builds.
func (f procFile) read(buf []byte) (int, error) {
	if f.path == nil || len(buf) == 0 {
		return 0, unix.EINVAL
	}
	dirfd := unix.AT_FDCWD // a variable: the constant is negative
	fd, _, e := unix.Syscall6(unix.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(f.path)),
		unix.O_RDONLY|unix.O_CLOEXEC, 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	n, _, e := unix.Syscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
	unix.Close(int(fd))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// Schedstat is a thread's scheduler statistics: its time on a CPU and its
// run delay (time runnable but waiting for a CPU), in ns, and how often it
// was scheduled in.
type Schedstat struct{ Run, Delay, Runs int64 }

var errSchedstat = errors.New("not a schedstat file (want three counts)")

// ReadSchedstat reads a schedstat file (/proc/<pid>/task/<tid>/schedstat,
// /proc/<tid>/schedstat): the one parser of these files in the tree's Go,
// for the wait path's signals, the OpenMP follower, the agent and the
// experiments. A vanished thread's error is fs.ErrNotExist.
func ReadSchedstat(path string) (Schedstat, error) { return newProcFile(path).schedstat() }

// schedstat reads and parses the file in place: no allocation, for the
// wait path's samples.
func (f procFile) schedstat() (Schedstat, error) {
	var buf [96]byte
	n, err := f.read(buf[:])
	if err != nil {
		return Schedstat{}, err
	}
	var v [3]int64
	rest := buf[:n]
	for i := range v {
		var field []byte
		field, rest = nextField(rest)
		x, err := strconv.ParseInt(string(field), 10, 64)
		if err != nil || x < 0 {
			return Schedstat{}, errSchedstat
		}
		v[i] = x
	}
	return Schedstat{Run: v[0], Delay: v[1], Runs: v[2]}, nil
}

// nextField returns the first space-separated field of b and what follows.
func nextField(b []byte) (field, rest []byte) {
	b = bytes.TrimLeft(b, " \t\n")
	i := bytes.IndexAny(b, " \t\n")
	if i < 0 {
		return b, nil
	}
	return b[:i], b[i:]
}

// readThrottled reads a cgroup's throttled time from cpu.stat in ns: v2
// says throttled_usec, v1 throttled_time (ns).
func readThrottled(f procFile) int64 {
	var buf [1024]byte
	n, err := f.read(buf[:])
	if err != nil {
		return 0
	}
	for rest := buf[:n]; len(rest) > 0; {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		k, v, ok := bytes.Cut(line, []byte(" "))
		if !ok {
			continue
		}
		x, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			continue
		}
		switch string(k) {
		case "throttled_usec":
			return x * 1000
		case "throttled_time":
			return x
		}
	}
	return 0
}
