package local

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/experiments/paper/workload"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/internal/reexec"
)

// spec is what a VM process runs: the built-in loop or a command.
type spec struct {
	CPUs    []int     `json:"cpus"`
	Loop    *loopSpec `json:"loop,omitempty"`
	Cmd     string    `json:"cmd,omitempty"`
	Mode    string    `json:"mode,omitempty"` // HYBRIDSYNC_MODE for Cmd
	Restart bool      `json:"restart,omitempty"`
	// Hold keeps the loop's process alive after it printed its result,
	// until fd 4 closes: a watcher (the agent) sees it to the end.
	Hold bool `json:"hold,omitempty"`
}

type loopSpec struct {
	Config workload.Config `json:"config"`
	Device string          `json:"device"`
	Mode   hybridsync.Mode `json:"mode"`
}

const envSpec = "VGPU_PROBE_LOCAL_VM"

func init() { reexec.Register("local-vm", vmMain) }

// vmProc is a VM process being started. The handshake: the child
// confines itself to its CPUs and opens its device, then closes fd 3
// (ready); the parent places it in its cgroup and closes the child's
// stdin (go).
type vmProc struct {
	cmd    *exec.Cmd
	ready  *os.File // read end of the child's fd 3
	start  io.WriteCloser
	hold   *os.File  // write end of the child's fd 4; closing it lets a held child exit
	stdout io.Reader // when startVM was given no stdout
}

// startVM starts the VM process for s; stdout is where its output goes,
// or, when nil, p.stdout is a pipe to read it from.
func startVM(s spec, stdout io.Writer) (*vmProc, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	cmd, err := reexec.Command("local-vm")
	if err != nil {
		return nil, err
	}
	cmd.Env = append(cmd.Env, envSpec+"="+string(b))
	p := &vmProc{cmd: cmd}
	if stdout != nil {
		cmd.Stdout = stdout
	} else if p.stdout, err = cmd.StdoutPipe(); err != nil {
		return nil, err
	}
	if p.start, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	hr, hw, err := os.Pipe()
	if err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	cmd.ExtraFiles = []*os.File{w, hr}
	err = cmd.Start()
	w.Close()
	hr.Close()
	if err != nil {
		r.Close()
		hw.Close()
		p.start.Close()
		return nil, fmt.Errorf("start VM process: %w", err)
	}
	p.ready, p.hold = r, hw
	return p, nil
}

// waitReady returns once the child is confined and ready to be placed, or
// with an error if it died first.
func (p *vmProc) waitReady() error {
	defer p.ready.Close()
	var b [1]byte
	if n, _ := p.ready.Read(b[:]); n != 1 {
		return fmt.Errorf("VM process %d exited before it was ready", p.cmd.Process.Pid)
	}
	return nil
}

// kill kills the process group and reaps the process.
func (p *vmProc) kill() {
	unix.Kill(-p.cmd.Process.Pid, unix.SIGKILL)
	p.hold.Close()
	p.cmd.Wait()
}

// vmMain runs in the VM process.
func vmMain() int {
	var s spec
	if err := json.Unmarshal([]byte(os.Getenv(envSpec)), &s); err != nil || len(s.CPUs) == 0 {
		fmt.Fprintln(os.Stderr, "local vm: bad spec:", err)
		return 2
	}
	// Confine every thread the runtime has made so far to the VM's CPUs;
	// threads made later inherit it from their creator. The loop's own
	// threads pin themselves to one vCPU each.
	if err := confine(s.CPUs); err != nil {
		fmt.Fprintln(os.Stderr, "local vm:", err)
		return 1
	}
	// The handshake: fd 3 closes once the VM is confined (and, for the
	// loop, every thread has its device open); then stdin's EOF says go.
	ready := func() error {
		f := os.NewFile(3, "ready")
		f.Write([]byte{1})
		f.Close()
		io.Copy(io.Discard, os.Stdin) // wait until the parent has placed us
		return nil
	}
	if s.Loop != nil {
		open, err := workload.ThreadOpenerFor(s.Loop.Device, s.Loop.Mode, len(s.CPUs))
		if err != nil {
			fmt.Fprintln(os.Stderr, "local vm:", err)
			return 1
		}
		r, err := workload.RunThreads(s.Loop.Config, s.CPUs, open, ready)
		if err != nil {
			fmt.Fprintln(os.Stderr, "local vm:", err)
			return 1
		}
		if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
			return 1
		}
		if s.Hold {
			os.Stdout.Close() // the parent has the result now
			io.Copy(io.Discard, os.NewFile(4, "hold"))
		}
		return 0
	}
	ready()
	for {
		c := exec.Command("/bin/sh", "-c", s.Cmd)
		c.Stdin, c.Stdout, c.Stderr = nil, os.Stdout, os.Stderr
		if s.Mode != "" {
			c.Env = append(os.Environ(), hybridsync.EnvMode+"="+s.Mode)
		}
		err := c.Run()
		if !s.Restart {
			if ee, ok := err.(*exec.ExitError); ok {
				return max(ee.ExitCode(), 1)
			} else if err != nil {
				fmt.Fprintln(os.Stderr, "local vm:", err)
				return 1
			}
			return 0
		}
		// A co-runner must last the whole measurement: start it again,
		// but not in a tight loop if it fails at once.
		if err != nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// confine sets the affinity of every thread of this process to cpus.
func confine(cpus []int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
			return fmt.Errorf("confine thread %d to cpus %v: %w", tid, cpus, err)
		}
	}
	return nil
}
