// Package proctree finds processes in /proc: a process's children, and
// every process that carries an environment entry. Tests use it to check
// that an experiment leaves nothing running: its children are in process
// groups of their own and are re-parented when it dies, but they inherit
// its environment.
package proctree

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Children returns the pids of pid's live (not zombie) child processes.
func Children(pid int) []int {
	var kids []int
	for _, p := range pids() {
		if ppid, state, ok := stat(p); ok && ppid == pid && state != "Z" {
			kids = append(kids, p)
		}
	}
	return kids
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
		_, state, ok := stat(p)
		if ok && state != "Z" && hasEntry(b, kv) {
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

// stat returns pid's parent and state from /proc/PID/stat.
func stat(pid int) (ppid int, state string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return 0, "", false
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 2 {
		return 0, "", false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[0], err == nil
}
