package signal

import (
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/cgroups"
)

// throttleReader follows the CPU bandwidth throttling of the cgroups the
// process is in: the sum of throttled time (ns) of every cgroup on its path
// that has a quota. The path is re-read now and then: a benchmark or a
// container runtime may move the process after it started. The counters
// themselves are read fresh for every sample, so that they cover the same
// window as the thread's run delay they are subtracted from.
type throttleReader struct {
	mu      sync.Mutex
	scanned int64
	files   atomic.Pointer[[]procFile] // cpu.stat files of the cgroups with a quota
	period  atomic.Int64               // quota period of the innermost of them (ns; 0: none)
}

const (
	cgroupRescan = 500_000_000
	cgroupRoot   = "/sys/fs/cgroup"
)

// throttled returns the throttled time in ns now.
func (r *throttleReader) throttled(now int64) int64 {
	if r.mu.TryLock() {
		if r.files.Load() == nil || now-r.scanned > cgroupRescan {
			f, period := quotaStatFiles()
			r.files.Store(&f)
			r.period.Store(period)
			r.scanned = now
		}
		r.mu.Unlock()
	}
	files := r.files.Load()
	if files == nil {
		return 0
	}
	var sum int64
	for _, f := range *files {
		sum += readThrottled(f)
	}
	return sum
}

// quotaStatFiles lists the cpu.stat files of the process's cgroups (its own
// and their ancestors) that have a CPU quota, for cgroup v2 and v1, and the
// quota period of the first (innermost) of them.
func quotaStatFiles() (files []procFile, period int64) {
	ms, err := cgroups.Of("", 0)
	if err != nil {
		return nil, 0
	}
	var out []procFile
	for _, m := range ms {
		var base string
		switch {
		case m.Unified():
			base = cgroupRoot
			if _, err := os.Stat(cgroupRoot + "/cgroup.controllers"); err != nil {
				continue // a v2 hierarchy without controllers (hybrid setups)
			}
		case m.Has("cpu"):
			base = cgroupRoot + "/" + strings.Join(m.Controllers, ",")
			if _, err := os.Stat(base); err != nil {
				base = cgroupRoot + "/cpu"
			}
		default:
			continue
		}
		for dir := m.Path; ; dir = parentDir(dir) {
			if _, p := cgroups.Quota(base + dir); p > 0 {
				out = append(out, newProcFile(base+dir+"/cpu.stat"))
				if period == 0 {
					period = int64(p)
				}
			}
			if dir == "/" || dir == "" {
				break
			}
		}
	}
	return out, period
}

func parentDir(d string) string {
	i := strings.LastIndexByte(d, '/')
	if i <= 0 {
		return "/"
	}
	return d[:i]
}

// stealReader follows steal and idle time per CPU from /proc/stat: steal,
// in a VM, the time the host ran something else on the physical CPU
// behind a vCPU; idle, the time nothing at all wanted the CPU. The
// counters tick in 10 ms units, so the rates are smoothed over about
// 100 ms instead of judged per sampling window.
type stealReader struct {
	mu     sync.Mutex
	readAt int64
	ticks  []CPUTicks // last counters per CPU
	frac   []cpuFrac  // smoothed fractions per CPU
	none   bool       // no steal column: not worth reading again
}

type cpuFrac struct{ steal, idle float64 }

const stealPeriod = 25_000_000

// fractions returns the recent steal and idle fractions of the CPU the
// caller runs on; idle is -1 where /proc/stat cannot be read or has not
// been read twice yet.
func (r *stealReader) fractions(now int64) (steal, idle float64) {
	var cpu, node uint32
	if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), uintptr(unsafe.Pointer(&node)), 0); e != 0 {
		return 0, -1
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.none && now-r.readAt >= stealPeriod {
		r.refresh(now)
	}
	if int(cpu) < len(r.frac) && !r.none && r.readAt != 0 {
		f := r.frac[cpu]
		return f.steal, f.idle
	}
	return 0, -1
}

func (r *stealReader) refresh(now int64) {
	all, err := ReadCPUTicks()
	if err != nil || len(all) == 0 {
		r.none = true // unreadable, or a kernel without the steal column
		return
	}
	dt := now - r.readAt
	first := r.readAt == 0
	r.readAt = now
	for _, c := range all {
		cpu := c.CPU
		if cpu > 1<<16 {
			continue
		}
		for len(r.ticks) <= cpu {
			r.ticks = append(r.ticks, CPUTicks{})
			r.frac = append(r.frac, cpuFrac{idle: -1}) // idle: not measured yet
		}
		if !first && dt > 0 {
			rate := func(d int64) float64 { return float64(d) * TickNs / float64(dt) }
			fr := &r.frac[cpu]
			fr.steal += (rate(c.Steal-r.ticks[cpu].Steal) - fr.steal) / 4
			// The first rate is taken as it is: smoothed from a guess,
			// the idle fraction would take 100s of ms to become true.
			idle := min(rate(c.Idle-r.ticks[cpu].Idle), 1)
			if fr.idle < 0 {
				fr.idle = idle
			} else {
				fr.idle += (idle - fr.idle) / 4
			}
		}
		r.ticks[cpu] = c
	}
}
