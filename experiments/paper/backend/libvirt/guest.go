package libvirt

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	lv "github.com/digitalocean/go-libvirt"

	"github.com/vgpu-probe/vgpu-probe/experiments/paper/backend/libvirt/job"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/clock"
)

// guestVM is one running domain and its job port.
type guestVM struct {
	name    string
	serial  string // console log, for error messages
	conn    net.Conn
	mu      sync.Mutex // serialises writes
	replies chan job.Reply
	pid     int   // QEMU's
	tids    []int // host thread of vCPU i
	nextID  int
}

// connect dials the domain's job socket, which QEMU listens on from before
// the guest starts; lines from the guest go to g.replies until it closes.
func (g *guestVM) connect(sock string) error {
	var err error
	for i := 0; i < 50; i++ {
		if g.conn, err = net.Dial("unix", sock); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("domain %s: job channel %s: %w", g.name, sock, err)
	}
	g.replies = make(chan job.Reply, 64)
	go func() {
		defer close(g.replies)
		sc := bufio.NewScanner(g.conn)
		sc.Buffer(make([]byte, 64<<10), 64<<20)
		for sc.Scan() {
			var r job.Reply
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				g.replies <- r
			}
		}
	}()
	return nil
}

// send writes j with a fresh id and returns the id.
func (g *guestVM) send(j job.Job) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.nextID++
	j.ID = g.nextID
	b, err := json.Marshal(j)
	if err != nil {
		return 0, err
	}
	if _, err := g.conn.Write(append(b, '\n')); err != nil {
		return 0, fmt.Errorf("domain %s: send %s job: %w", g.name, j.Kind, err)
	}
	return j.ID, nil
}

// wait returns the guest's reply of type want (ready: any id) or its
// error, within timeout.
func (g *guestVM) wait(ctx context.Context, id int, want string, timeout time.Duration, what string) (job.Reply, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case r, ok := <-g.replies:
			if !ok {
				return job.Reply{}, fmt.Errorf("domain %s: the guest closed its job channel before %s%s", g.name, what, g.consoleTail())
			}
			if r.Type == job.TypeError && (r.ID == id || r.ID == 0) {
				return r, fmt.Errorf("domain %s: %s: guest says: %s", g.name, what, r.Error)
			}
			if r.Type == want && (want == job.TypeReady || r.ID == id) {
				return r, nil
			}
		case <-t.C:
			return job.Reply{}, fmt.Errorf("domain %s: no %s from the guest within %s%s", g.name, what, timeout, g.consoleTail())
		case <-ctx.Done():
			return job.Reply{}, ctx.Err()
		}
	}
}

// do sends j and waits for its result.
func (g *guestVM) do(ctx context.Context, j job.Job, timeout time.Duration) (job.Reply, error) {
	id, err := g.send(j)
	if err != nil {
		return job.Reply{}, err
	}
	return g.wait(ctx, id, job.TypeResult, timeout, j.Kind+" result")
}

// clockOffset estimates host CLOCK_MONOTONIC minus the guest's from the
// ping with the shortest round trip (its reply was made near the middle).
func (g *guestVM) clockOffset(ctx context.Context, timeout time.Duration) (int64, error) {
	best, off := int64(1<<62), int64(0)
	for range 5 {
		t0 := clock.Now()
		r, err := g.do(ctx, job.Job{Kind: job.Ping}, timeout)
		if err != nil {
			return 0, err
		}
		t1 := clock.Now()
		if rtt := t1 - t0; rtt < best {
			best, off = rtt, (t0+t1)/2-r.GuestNs
		}
	}
	return off, nil
}

// consoleTail is the end of the guest console, to say why it went quiet.
func (g *guestVM) consoleTail() string {
	b, err := os.ReadFile(g.serial)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	last := lines[len(lines)-1]
	if last == "" {
		return " (guest console empty: the kernel did not boot?)"
	}
	return fmt.Sprintf(" (last console line: %q)", strings.TrimSpace(last))
}

// readThreads finds QEMU's pid and each vCPU's host thread: what the
// agent watches, and the tids the results name.
func (g *guestVM) readThreads(l *lv.Libvirt, dom lv.Domain) error {
	b, err := os.ReadFile(filepath.Join("/run/libvirt/qemu", g.name+".pid"))
	if err != nil {
		return fmt.Errorf("domain %s: qemu pid: %w", g.name, err)
	}
	if g.pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
		return fmt.Errorf("domain %s: qemu pid: %w", g.name, err)
	}
	out, err := l.QEMUDomainMonitorCommand(dom, `{"execute":"query-cpus-fast"}`, 0)
	if err != nil || len(out) == 0 {
		return fmt.Errorf("domain %s: query-cpus-fast: %v", g.name, err)
	}
	var reply struct {
		Return []struct {
			Index    int `json:"cpu-index"`
			ThreadID int `json:"thread-id"`
		} `json:"return"`
	}
	if err := json.Unmarshal([]byte(out), &reply); err != nil {
		return fmt.Errorf("domain %s: query-cpus-fast: %w", g.name, err)
	}
	g.tids = make([]int, len(reply.Return))
	for _, c := range reply.Return {
		if c.Index >= 0 && c.Index < len(g.tids) {
			g.tids[c.Index] = c.ThreadID
		}
	}
	return nil
}

func (g *guestVM) close() {
	if g.conn != nil {
		g.conn.Close()
	}
}
