package runner

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vgpu-probe/vgpu-probe/profiler/agentapi"
	"github.com/vgpu-probe/vgpu-probe/results"
)

// PIDAgent returns an AgentFunc that runs exe's agent subcommand (exe is
// vgpu-probe) on the runner's and the co-runners' processes.
func PIDAgent(exe string) AgentFunc {
	return func(ctx context.Context, runnerPid int, corunners []int, ready func(), done <-chan struct{}) (AgentRun, error) {
		var args, keys []string
		for _, pid := range append([]int{runnerPid}, corunners...) {
			args = append(args, "--pid", strconv.Itoa(pid))
			keys = append(keys, strconv.Itoa(pid))
		}
		return watchWithAgent(ctx, exe, args, keys, ready, done)
	}
}

// DomainAgent returns an AgentFunc that runs exe's agent subcommand on
// the domains of libvirtd at uri, through the agent's libvirt discovery,
// so that a cell shows the vCPU threads as the host sees them beside the
// guest's own timeline; domainOf names the domain whose QEMU has pid ("":
// none of ours).
func DomainAgent(exe, uri string, domainOf func(pid int) string) AgentFunc {
	return func(ctx context.Context, runnerPid int, corunners []int, ready func(), done <-chan struct{}) (AgentRun, error) {
		var keys []string
		for _, pid := range append([]int{runnerPid}, corunners...) {
			name := domainOf(pid)
			if name == "" {
				return AgentRun{}, fmt.Errorf("agent: no domain of ours has QEMU pid %d", pid)
			}
			keys = append(keys, name)
		}
		return watchWithAgent(ctx, exe, []string{"--libvirt-uri", uri}, keys, ready, done)
	}
}

// watchWithAgent runs the agent with targetArgs, serving on a free
// loopback port; keys name its targets (the runner's first) as its
// timeline endpoint knows them. Once it has logged that it watches every
// one of them, it calls ready; once done closes, it takes the agent's
// snapshot and each target's switch timeline, and stops it.
func watchWithAgent(ctx context.Context, exe string, targetArgs, keys []string, ready func(), done <-chan struct{}) (AgentRun, error) {
	var run AgentRun
	// Trace continuously: the timelines must cover every step.
	args := append([]string{"agent", "--listen", "127.0.0.1:0", "--trace-every", "0"}, targetArgs...)
	cmd := exec.Command(exe, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return run, err
	}
	if err := cmd.Start(); err != nil {
		return run, fmt.Errorf("agent: %w", err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		t := time.AfterFunc(5*time.Second, func() { cmd.Process.Kill() })
		cmd.Wait()
		t.Stop()
	}()
	addr, err := agentReady(ctx, bufio.NewScanner(stderr), keys)
	if err != nil {
		return run, err
	}
	started := time.Now()
	ready()
	select {
	case <-done:
	case <-ctx.Done():
		return run, ctx.Err()
	}
	client, err := agentapi.New("http://"+addr, nil)
	if err != nil {
		return run, err
	}
	snap, err := client.Snapshot(ctx)
	if err != nil {
		return run, err
	}
	if run.Snapshot, err = json.Marshal(snap); err != nil {
		return run, err
	}
	secs := int(math.Ceil(time.Since(started).Seconds())) + 1
	for i, key := range keys {
		evs, err := client.Timeline(ctx, key, secs)
		if err != nil {
			return run, err
		}
		run.Tracks = append(run.Tracks, tracks(i, evs)...)
	}
	return run, nil
}

// agentReady reads the agent's log until it serves and watches every
// target in keys, and returns the address it serves on. The agent logs
// "serving ... listen=ADDR" and one "watching target" line per target
// once it has taken it in; its last line says why, if it fails.
func agentReady(ctx context.Context, sc *bufio.Scanner, keys []string) (string, error) {
	addrCh, readyCh, last := make(chan string, 1), make(chan struct{}), make(chan string, 1)
	go func() {
		seen, line := map[string]bool{}, ""
		for sc.Scan() {
			line = strings.TrimSpace(sc.Text())
			if i := strings.Index(line, "listen="); i >= 0 {
				select {
				case addrCh <- strings.Fields(line[i+len("listen="):])[0]:
				default:
				}
			}
			if strings.Contains(line, "watching target") {
				for _, k := range keys {
					if strings.Contains(line+" ", "/"+k+" ") && !seen[k] {
						if seen[k] = true; len(seen) == len(keys) {
							close(readyCh)
						}
					}
				}
			}
		}
		last <- line
	}()
	var addr string
	for addr == "" || readyCh != nil {
		select {
		case addr = <-addrCh:
		case <-readyCh:
			readyCh = nil
		case msg := <-last:
			return "", fmt.Errorf("agent exited: %s", msg)
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(AgentStartTimeout):
			return "", errors.New("agent: not watching its targets after " + AgentStartTimeout.String())
		}
	}
	return addr, nil
}

// tracks turns VM vm's off-CPU intervals into a track per thread, each
// interval preceded by the run that ended in it.
func tracks(vm int, evs []agentapi.OffCPU) []results.ThreadTrack {
	byTID := map[uint32]*results.ThreadTrack{}
	var order []uint32
	for _, ev := range evs {
		t := byTID[ev.TID]
		if t == nil {
			t = &results.ThreadTrack{Name: trackName(vm, int(ev.TID)), TID: int(ev.TID)}
			byTID[ev.TID] = t
			order = append(order, ev.TID)
		}
		out, in := int64(ev.StartNs), int64(ev.EndNs)
		t.Intervals = append(t.Intervals,
			results.Interval{Start: out - int64(ev.RunUS*1e3), End: out, On: true},
			results.Interval{Start: out, End: in, On: false})
	}
	out := make([]results.ThreadTrack, len(order))
	for i, tid := range order {
		out[i] = *byTID[tid]
	}
	return out
}

// trackName names a thread's track: the runner's (VM 0) or a co-runner's.
func trackName(vm, tid int) string {
	if vm == 0 {
		return fmt.Sprintf("runner tid %d", tid)
	}
	return fmt.Sprintf("corunner%d tid %d", vm, tid)
}
