package advise

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Uses is what a program showed of itself in one run: whether it loaded
// CUDA or an OpenMP runtime, and how many of its threads worked.
type Uses struct {
	CUDA bool
	// OpenMP is the runtime it loaded ("libgomp", "libomp", ...); ""
	// none.
	OpenMP string
	// Threads is how many of its threads had CPU time of at least a
	// tenth of the run's wall time at once, at most: the threads that
	// compete for CPUs (a runtime's idle helpers do not count).
	Threads int
	Wall    time.Duration
	// Seen: the program's maps were read at least once before it ended;
	// without, nothing is known of what it loads.
	Seen bool
	Err  error // the run's own failure, if any
}

// Words says what the program uses, for advise's lines.
func (u Uses) Words() string {
	var s []string
	if u.CUDA {
		s = append(s, "CUDA")
	}
	if u.OpenMP != "" {
		s = append(s, "OpenMP ("+u.OpenMP+")")
	}
	if len(s) == 0 {
		return "no CUDA and no OpenMP runtime"
	}
	return strings.Join(s, " and ")
}

// runtimes are the libraries a process's maps show, by the name probe
// reports: CUDA's driver and runtime, the OpenMP runtimes.
var runtimes = []struct{ file, name string }{
	{"libcuda.so", "cuda"}, {"libcudart.so", "cuda"},
	{"libgomp.so", "libgomp"}, {"libomp.so", "libomp"}, {"libiomp5.so", "libiomp5"},
}

// probeEvery is how often probe reads the program's threads and maps:
// every millisecond over its first tenth of a second, so that a short
// program is seen after it loaded its libraries, then every 10 ms.
const (
	probeFirst = time.Millisecond
	probeEvery = 10 * time.Millisecond
	probeFast  = 100 * time.Millisecond
)

// probe runs argv once as it is and watches it: the libraries its
// processes map (CUDA's are mapped by the first CUDA call at the latest,
// an OpenMP runtime before the first parallel region), and its threads'
// CPU time. It reads /proc rather than the library's stats, which a
// program with neither CUDA nor OpenMP never has written.
func probe(ctx context.Context, argv []string) Uses {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var errTail tailBuffer
	cmd.Stderr = &errTail
	start := time.Now()
	var u Uses
	if u.Err = cmd.Start(); u.Err != nil {
		return u
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	w := watcher{pid: cmd.Process.Pid, cpu: map[int]float64{}}
	tick := time.NewTicker(probeFirst)
	defer tick.Stop()
	slowed := false
	for {
		select {
		case u.Err = <-done:
			u.Wall = time.Since(start)
			if last := errTail.lastLine(); u.Err != nil && last != "" {
				u.Err = fmt.Errorf("%w: %s", u.Err, last)
			}
			u.Threads = max(1, w.busy)
			u.CUDA, u.OpenMP, u.Seen = w.cuda, w.omp, w.seen
			return u
		case <-tick.C:
			w.look()
			if !slowed && time.Since(start) > probeFast {
				tick.Reset(probeEvery)
				slowed = true
			}
		}
	}
}

// watcher keeps what probe saw of a process tree.
type watcher struct {
	pid       int
	cpu       map[int]float64 // CPU seconds by thread at the last look
	last      time.Time
	busy      int
	cuda      bool
	omp       string
	lookedAny bool
	seen      bool // a maps file was read
}

// look reads every process of the tree once: its maps, and its threads'
// CPU time since the last look.
func (w *watcher) look() {
	now := time.Now()
	dt := now.Sub(w.last).Seconds()
	busy := 0
	for _, pid := range tree(w.pid) {
		w.maps(pid)
		busy += w.threads(pid, dt)
	}
	if w.lookedAny {
		w.busy = max(w.busy, busy)
	}
	w.last, w.lookedAny = now, true
}

// maps notes the runtimes pid maps.
func (w *watcher) maps(pid int) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil || len(b) == 0 {
		return
	}
	w.seen = true
	s := string(b)
	for _, r := range runtimes {
		if !strings.Contains(s, "/"+r.file) {
			continue
		}
		if r.name == "cuda" {
			w.cuda = true
		} else if !strings.Contains(w.omp, r.name) {
			w.omp = strings.TrimPrefix(w.omp+"+"+r.name, "+")
		}
	}
}

// threads counts pid's threads that ran for a tenth or more of the time
// since the last look.
func (w *watcher) threads(pid int, dt float64) int {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		tid, _ := strconv.Atoi(e.Name())
		s, ok := cpuSeconds(filepath.Join(dir, e.Name(), "stat"))
		if !ok {
			continue
		}
		prev, seen := w.cpu[tid]
		w.cpu[tid] = s
		if seen && dt > 0 && (s-prev)/dt >= 0.1 {
			n++
		}
	}
	return n
}

// clockTick is the kernel's USER_HZ, the unit of /proc's CPU times; 100
// on every Linux architecture the project builds for.
const clockTick = 100

// cpuSeconds is a thread's user and system CPU seconds from its stat file.
func cpuSeconds(path string) (float64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from after its closing one.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	return (ut + st) / clockTick, err1 == nil && err2 == nil
}

// tree is pid and its descendants, from each thread's children file.
func tree(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", out[i]))
		for _, t := range tasks {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", out[i], t.Name()))
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// tailBuffer keeps the last KiB written to it.
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 1024 {
		t.b = t.b[len(t.b)-1024:]
	}
	return len(p), nil
}

// lastLine is the last line that is not empty.
func (t *tailBuffer) lastLine() string {
	lines := strings.Split(strings.TrimSpace(string(t.b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
