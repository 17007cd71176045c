// Package proctree finds processes in /proc: a process's children and
// descendants, the members of a process group, every process that carries
// an environment entry, and the CPU time a process and its reaped
// descendants used. Tests use it to check that an experiment leaves
// nothing running: its children are in process groups of their own and
// are re-parented when it dies, but they inherit its environment. apps
// uses it to time a program's whole process tree and to cap it, and the
// agent to watch one.
package proctree

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"time"
)

// Children returns the pids of pid's live (not zombie) child processes.
func Children(pid int) []int {
	return live(func(st procStat) bool { return st.ppid == pid })
}

// Descendants returns the pids of pid's live (not zombie) descendants,
// parents before their children, from one scan of /proc.
func Descendants(pid int) []int {
	kids := map[int][]int{}
	for _, p := range pids() {
		if st, ok := stat(p); ok && st.state != "Z" {
			kids[st.ppid] = append(kids[st.ppid], p)
		}
	}
	var out []int
	for queue := kids[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, kids[queue[0]]...)
	}
	return out
}

// Group returns the pids of the live (not zombie) processes of process
// group pgid.
func Group(pgid int) []int {
	return live(func(st procStat) bool { return st.pgrp == pgid })
}

// live returns the pids of the live (not zombie) processes that keep
// accepts.
func live(keep func(procStat) bool) []int {
	var found []int
	for _, p := range pids() {
		if st, ok := stat(p); ok && st.state != "Z" && keep(st) {
			found = append(found, p)
		}
	}
	return found
}

// clockTick is the unit of /proc/PID/stat's times (USER_HZ), 1/100 s on
// every Linux architecture: the kernel scales them to it whatever its own
// tick.
const clockTick = 10 * time.Millisecond

// CPU returns the CPU time (user and system) pid has used so far, its
// threads together, plus that of the children it has reaped (which
// include theirs); ok false when pid is gone. Its resolution is 10 ms.
func CPU(pid int) (time.Duration, bool) {
	st, ok := stat(pid)
	if !ok {
		return 0, false
	}
	return time.Duration(st.utime+st.stime+st.cutime+st.cstime) * clockTick, true
}

// WithEnv returns the pids of live processes whose environment holds the
// entry kv ("NAME=value"); reading another user's environment needs root.
func WithEnv(kv string) []int {
	var found []int
	for _, p := range pids() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/environ")
		if err != nil {
			continue
		}
		st, ok := stat(p)
		if ok && st.state != "Z" && hasEntry(b, kv) {
			found = append(found, p)
		}
	}
	return found
}

// Env returns the value of name in pid's environment, "" when absent.
func Env(pid int, name string) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	for e := range bytes.SplitSeq(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(e, []byte(name+"=")); ok {
			return string(v)
		}
	}
	return ""
}

func hasEntry(environ []byte, kv string) bool {
	for e := range bytes.SplitSeq(environ, []byte{0}) {
		if string(e) == kv {
			return true
		}
	}
	return false
}

func pids() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if p, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// procStat is what this package reads of /proc/PID/stat.
type procStat struct {
	state                        string
	ppid, pgrp                   int
	utime, stime, cutime, cstime int64 // clock ticks
}

// stat reads /proc/PID/stat (proc(5)): after the command in parentheses,
// which may itself hold ") ", come state, ppid, pgrp, ..., and from the
// 14th field utime, stime, cutime, cstime.
func stat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return procStat{}, false
	}
	f := strings.Fields(s[i+2:]) // f[0] is field 3 (state)
	if len(f) < 15 {
		return procStat{}, false
	}
	var n [6]int64
	for k, idx := range []int{1, 2, 11, 12, 13, 14} {
		if n[k], err = strconv.ParseInt(f[idx], 10, 64); err != nil {
			return procStat{}, false
		}
	}
	return procStat{state: f[0], ppid: int(n[0]), pgrp: int(n[1]), utime: n[2], stime: n[3], cutime: n[4], cstime: n[5]}, true
}
