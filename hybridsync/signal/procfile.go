package signal

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
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

// CPUTicks is one CPU's line of /proc/stat, in clock ticks (TickNs): its
// steal ticks (in a VM, the time the host ran something else on the
// physical CPU behind it), its idle ones (idle and iowait) and all its
// ticks.
type CPUTicks struct {
	CPU                int
	Steal, Idle, Total int64
}

// TickNs is USER_HZ, the unit of /proc/stat, in ns (100 Hz on every Linux
// ABI).
const TickNs = 10_000_000

// ReadCPUTicks reads each CPU's line of /proc/stat: the one reader of the
// file in the tree's Go, for the contention signal, the OpenMP probe and
// follower, and the tests' disturbance figures.
func ReadCPUTicks() ([]CPUTicks, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil, err
	}
	return ParseCPUTicks(string(b)), nil
}

// ParseCPUTicks reads the per-CPU lines of /proc/stat ("cpuN user nice
// system idle iowait irq softirq steal ..."); a kernel without the steal
// column has no lines to give.
func ParseCPUTicks(s string) []CPUTicks {
	var out []CPUTicks
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		cpu, err := strconv.Atoi(f[0][3:])
		if err != nil || cpu < 0 {
			continue
		}
		c := CPUTicks{CPU: cpu}
		for i, v := range f[1:] {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				break
			}
			switch i {
			case 3, 4:
				c.Idle += n
			case 7:
				c.Steal = n
			}
			// guest and guest_nice (9th and 10th) are already in user
			// and nice.
			if i < 8 {
				c.Total += n
			}
		}
		out = append(out, c)
	}
	return out
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
