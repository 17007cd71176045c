package suite

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/signal"
	"github.com/vgpu-probe/vgpu-probe/internal/reexec"
)

func TestMain(m *testing.M) {
	reexec.Init()
	if os.Getenv("SUITE_STANDIN") != "" {
		os.Exit(standinMain())
	}
	os.Exit(m.Run())
}

// standinEnv are the variables the stand-in records.
var standinEnv = []string{"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "LD_PRELOAD", "HYBRIDSYNC_STATS",
	"HYBRIDSYNC_RUN_SET", "HYBRIDSYNC_OPENMP", "FAKE_LAUNCHER", "FAKE_LAUNCHER_SAW"}

// standinInfo is what a stand-in run saw: the CPUs each of its threads
// may run on, the environment, and its parent's busy-loop co-runner: the
// CPUs each of its threads may run on, and how long each ran in a
// window of 300 ms while the stand-in slept.
type standinInfo struct {
	Threads [][]int           `json:"threads"`
	Env     map[string]string `json:"env"` // absent: unset
	Busy    []busyThread      `json:"busy"`
}

type busyThread struct {
	CPUs  []int `json:"cpus"`
	RanNs int64 `json:"ran_ns"`
}

// standinMain is a stand-in for a GPU program: it records where it runs
// and what it got (standinInfo) under --info, then prints its result
// line.
func standinMain() int {
	fs := flag.NewFlagSet("standin", flag.ContinueOnError)
	info := fs.String("info", "", "directory for a file about this run")
	fs.Float64("seconds", 0, "ignored")
	ready := fs.String("ready", "", "write this line to stderr once the info is written")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	var in standinInfo
	own, _ := corunner.Online()
	// Wait for the co-runner's threads to pin themselves, as many as the
	// CPUs this program has (there is none alone).
	if pid := corunnerOf(os.Getppid()); pid > 0 {
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			pinned := 0
			for _, th := range threadsOf(pid) {
				if len(th.CPUs) == 1 {
					pinned++
				}
			}
			if pinned >= len(own) {
				break
			}
		}
		before := threadsOf(pid)
		time.Sleep(300 * time.Millisecond)
		after := threadsOf(pid)
		for tid, th := range after {
			th.RanNs -= before[tid].RanNs
			in.Busy = append(in.Busy, th)
		}
	}
	for _, th := range threadsOf(os.Getpid()) {
		in.Threads = append(in.Threads, th.CPUs)
	}
	in.Env = map[string]string{}
	for _, v := range standinEnv {
		if val, ok := os.LookupEnv(v); ok {
			in.Env[v] = val
		}
	}
	if s := os.Getenv("HYBRIDSYNC_STATS"); s != "" {
		os.WriteFile(s, []byte("{}\n"), 0o644)
	}
	if *info != "" {
		b, _ := json.Marshal(in)
		if err := os.WriteFile(filepath.Join(*info, strconv.Itoa(os.Getpid())+".json"), b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "standin:", err)
			return 1
		}
	}
	if *ready != "" {
		fmt.Fprintln(os.Stderr, *ready)
	}
	fmt.Println(`{"program":"standin","steps":10,"wall_s":0.5,"cpu_s":0.25}`)
	return 0
}

// corunnerOf returns the pid of a co-runner process that parent started
// (experiments/corunner, by its reexec entry), 0 if there is none.
func corunnerOf(parent int) int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, s := range stats {
		b, err := os.ReadFile(s)
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+2:]))
		if len(f) < 2 || f[1] != strconv.Itoa(parent) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(s)))
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		for _, kv := range strings.Split(string(env), "\x00") {
			if kv == "VGPU_PROBE_REEXEC=corunner" {
				return pid
			}
		}
	}
	return 0
}

// threadsOf returns pid's threads by tid: the CPUs each may run on
// (Cpus_allowed_list) and its run time so far (schedstat).
func threadsOf(pid int) map[string]busyThread {
	out := map[string]busyThread{}
	dirs, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	for _, d := range dirs {
		var th busyThread
		status, err := os.ReadFile(filepath.Join(d, "status"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
				th.CPUs, _ = corunner.ParseCPUs(strings.TrimSpace(v))
			}
		}
		if st, err := signal.ReadSchedstat(filepath.Join(d, "schedstat")); err == nil {
			th.RanNs = st.Run
		}
		out[filepath.Base(d)] = th
	}
	return out
}

// standinCommand is a program command that runs the stand-in with args.
func standinCommand(t *testing.T, args ...string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// GORACE: a race-enabled binary otherwise sleeps a second at exit.
	return "env SUITE_STANDIN=1 GORACE=atexit_sleep_ms=0 " + self + " " + strings.Join(args, " ")
}
