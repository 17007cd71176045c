package job

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/workload"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/clock"
	"github.com/vgpu-probe/vgpu-probe/results"
)

// FindPort returns the device of the virtio-serial port named name, from
// sysfs (there is no udev in the guest to make /dev/virtio-ports links).
func FindPort(name string) (string, error) {
	dirs, _ := filepath.Glob("/sys/class/virtio-ports/*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "name"))
		if err == nil && strings.TrimSpace(string(b)) == name {
			return "/dev/" + filepath.Base(d), nil
		}
	}
	return "", fmt.Errorf("no virtio-serial port named %s (are virtio_console and the <channel> there?)", name)
}

// guest is the guest's end of the port. Replies are written whole, one
// line each, from any goroutine.
type guest struct {
	mu   sync.Mutex
	port io.Writer
	cpus []int
	// heard closes when the host's first line arrives: until then the
	// ready line is repeated, since a line sent before the host connected
	// to its socket is lost.
	heard chan struct{}
}

// RunGuest runs first, talking to the host over port, and returns when it
// is done (a co-runner never is). Errors are also sent to the host.
func RunGuest(first Job, port io.ReadWriter) error {
	g := &guest{port: port, heard: make(chan struct{})}
	for c := range runtime.NumCPU() {
		g.cpus = append(g.cpus, c)
	}
	if err := first.Validate(); err != nil {
		g.send(Reply{Type: TypeError, ID: first.ID, Error: err.Error()})
		return err
	}
	lines := make(chan Job)
	go g.read(port, lines)
	switch first.Kind {
	case Serve:
		go g.announce(first.ID)
		for j := range lines {
			if j.Kind == Poweroff {
				return nil
			}
			g.send(g.do(j))
		}
		return errors.New("the host closed the job port")
	case Corunner:
		p, err := corunner.Start(first.Corunner, g.cpus)
		if err != nil {
			g.send(Reply{Type: TypeError, ID: first.ID, Error: err.Error()})
			return err
		}
		go g.announce(first.ID)
		for j := range lines {
			if j.Kind == Ping {
				g.send(g.do(j))
			}
		}
		// The port closed; the co-runner goes on until the host
		// destroys the domain.
		p.Stop()
		select {}
	default:
		g.send(g.do(first))
		return nil
	}
}

func (g *guest) read(r io.Reader, out chan<- Job) {
	defer close(out)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	first := true
	for sc.Scan() {
		if first {
			close(g.heard)
			first = false
		}
		var j Job
		if err := json.Unmarshal(sc.Bytes(), &j); err != nil {
			// Answer by the job's id where it has one (a job with an
			// unknown mode, say), so that the host waiting for it hears
			// why now, not at its timeout.
			var id struct {
				ID int `json:"id"`
			}
			json.Unmarshal(sc.Bytes(), &id)
			g.send(Reply{Type: TypeError, ID: id.ID, Error: "bad job line: " + err.Error()})
			continue
		}
		out <- j
	}
}

func (g *guest) announce(id int) {
	for {
		g.send(Reply{Type: TypeReady, ID: id, CPUs: len(g.cpus)})
		select {
		case <-g.heard:
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (g *guest) send(r Reply) {
	r.GuestNs = clock.Now()
	b, err := json.Marshal(r)
	if err != nil {
		b, _ = json.Marshal(Reply{Type: TypeError, ID: r.ID, GuestNs: r.GuestNs, Error: err.Error()})
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.port.Write(append(b, '\n'))
}

// do runs one job and returns its reply.
func (g *guest) do(j Job) Reply {
	if err := j.Validate(); err != nil {
		return Reply{Type: TypeError, ID: j.ID, Error: err.Error()}
	}
	r := Reply{Type: TypeResult, ID: j.ID}
	var err error
	switch j.Kind {
	case Ping:
	case Calibrate:
		r.Work = workload.CalibrateOn(g.cpus[0], time.Duration(j.HostNs))
	case Loop:
		r.Result, err = g.loop(j)
	case Gaps:
		r.Gaps, err = g.gaps(time.Duration(j.Seconds * float64(time.Second)))
	case Command:
		r.Command, err = runCommand(j)
	default:
		err = fmt.Errorf("job %s cannot run here", j.Kind)
	}
	if err != nil {
		return Reply{Type: TypeError, ID: j.ID, Error: err.Error()}
	}
	return r
}

// loop runs the NAMD-like loop with one thread per vCPU, as the local
// backend's runner process does, and adds the CPU time it took.
func (g *guest) loop(j Job) (*results.Result, error) {
	cfg, err := workload.SimConfigFor(j.Mode, j.Threshold, HintPage)
	if err != nil {
		return nil, err
	}
	open, s := workload.SimThreadOpener(cfg, len(g.cpus))
	cpu0 := cpuTime()
	r, err := workload.RunThreads(j.Config, g.cpus, open, nil)
	if err != nil {
		return nil, err
	}
	r.CPUS = (cpuTime() - cpu0).Seconds()
	r.Hints = s.Stats(nil).Hints
	return &r, nil
}

func cpuTime() time.Duration {
	var u syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &u)
	return time.Duration(syscall.TimevalToNsec(u.Utime) + syscall.TimevalToNsec(u.Stime))
}

// GapThreshold is the shortest jump of the clock between two reads in a
// tight loop that counts as the vCPU having been away. A read takes well
// under a microsecond even under TCG; a guest timer interrupt costs a few.
const GapThreshold = 30 * time.Microsecond

// LongGap is the shortest gap counted in VCPUGaps.LongS.
const LongGap = time.Millisecond

// gaps spins on every vCPU for d, reading the clock, and sums the jumps.
func (g *guest) gaps(d time.Duration) ([]VCPUGaps, error) {
	out := make([]VCPUGaps, len(g.cpus))
	errs := make([]error, len(g.cpus))
	var wg sync.WaitGroup
	for i, c := range g.cpus {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			if errs[i] = corunner.Pin(c); errs[i] == nil {
				out[i] = spinGaps(c, d)
			}
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

func spinGaps(vcpu int, d time.Duration) VCPUGaps {
	var gaps []int64
	start := clock.Now()
	end := start + int64(d)
	last := start
	for last < end {
		now := clock.Now()
		if now-last >= int64(GapThreshold) {
			gaps = append(gaps, now-last)
		}
		last = now
	}
	v := VCPUGaps{VCPU: vcpu, StartNs: start, EndNs: last, Count: len(gaps)}
	var sum, long int64
	for _, x := range gaps {
		sum += x
		if x >= int64(LongGap) {
			long += x
		}
	}
	v.TotalS, v.LongS = float64(sum)/1e9, float64(long)/1e9
	if len(gaps) > 0 {
		slices.Sort(gaps)
		v.MaxUS = float64(gaps[len(gaps)-1]) / 1e3
		v.P50US = float64(gaps[len(gaps)/2]) / 1e3
	}
	return v
}
