// Package reexec runs parts of this program as child processes of itself:
// co-runners and workload cells need their own process (to be pinned,
// put in a cgroup, measured and killed alone) but should not need a second
// binary. The child is the same executable started with an environment
// variable naming the entry point; Init, called first thing in main (and in
// TestMain of tests that start children), runs that entry point instead.
package reexec

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

const envName = "VGPU_PROBE_REEXEC"

var entries = map[string]func() int{}

// Register names an entry point. Call it from an init function.
func Register(name string, main func() int) {
	if _, dup := entries[name]; dup {
		panic("reexec: " + name + " registered twice")
	}
	entries[name] = main
}

// Init runs the entry point this process was started for, if any, and
// exits with its status; in a normal start it returns at once.
func Init() {
	name := os.Getenv(envName)
	if name == "" {
		return
	}
	main, ok := entries[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "reexec: unknown entry point %q\n", name)
		os.Exit(2)
	}
	os.Exit(main())
}

// Command returns a command that runs the entry point name in a child
// process, with args in os.Args[1:]. The child is killed if this process
// dies, so an interrupted experiment leaves no busy loop behind.
func Command(name string, args ...string) (*exec.Cmd, error) {
	if _, ok := entries[name]; !ok {
		return nil, fmt.Errorf("reexec: unknown entry point %q", name)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), envName+"="+name)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	return cmd, nil
}
