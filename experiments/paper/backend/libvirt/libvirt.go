// Package libvirt is the experiment backend with real VMs: the GPU runner
// and the co-runners are libvirt domains booted from the vmimages guest,
// their vCPUs pinned (<vcpupin>, <emulatorpin>) to the CPU set they share
// and, for shared2, limited by <cputune> period/quota. The runner's guest
// runs the NAMD-like loop on the simulated GPU and sends its results back
// over virtio-serial (subpackage job); the co-runners' guests run a busy
// co-runner. Every domain is named vgpu-probe-run-PID-N-ROLE and destroyed
// by Destroy, on failure, and by the next run if this one was killed.
package libvirt

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	lv "github.com/digitalocean/go-libvirt"

	"github.com/vgpu-probe/vgpu-probe/agent/hints"
	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/backend"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/backend/libvirt/job"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/workload"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
	"github.com/vgpu-probe/vgpu-probe/results"
	"github.com/vgpu-probe/vgpu-probe/vmimages"
)

// Defaults for Backend's timeouts.
const (
	DefaultBootTimeout = 120 * time.Second
	DefaultJobTimeout  = 10 * time.Minute
	connectTimeout     = 10 * time.Second
)

// Backend creates topologies as libvirt domains. Its zero value uses
// qemu:///system, the image in vmimages.DefaultDir and the probed domain
// type. Use one Backend per experiment: it calibrates the runner's host
// work once, in the first runner guest, and keeps it for every group so
// that all cells do the same work.
type Backend struct {
	URI      string
	ImageDir string
	// Type is the domain type; "" probes (vmimages.ProbeType).
	Type string
	// HostWork is the host work per step of the loop, calibrated in the
	// guest (a TCG guest runs the host's calibrated amount many times
	// slower).
	HostWork time.Duration
	// BootTimeout bounds a guest's boot to its ready line; JobTimeout one
	// loop run.
	BootTimeout, JobTimeout time.Duration
	// HostDevs are PCI devices passed through to the runner (a GPU).
	HostDevs []string
	// Shmem, when set, gives the runner a libvirt <shmem> device (a file
	// in /dev/shm, which every user may write: not for the agent's hint
	// pages, which Hints gives).
	Shmem *vmimages.Shmem
	// Hints, when set, publishes each runner domain's hint page: the
	// backend makes the page (Hints.Path, in the agent's directory)
	// before the domain starts, owned by libvirt's QEMU user, and the
	// runner gets the ivshmem device over it (hintpage.LibvirtArgs, as
	// <qemu:commandline>; it replaces Shmem); its guest exposes it
	// (vgpu-probe guest), and its loops read it (threshold hints).
	Hints HintPublisher
	// Mitigation, when set, watches each runner domain's vCPU threads
	// on the host while the domain exists, to give them a short EEVDF
	// slice (hintfeed.Feed with a mitigation); one that is also Hints is
	// told once.
	Mitigation Watcher
	// Log, when set, is told what the backend is doing (boots take
	// seconds under TCG).
	Log func(msg string)

	mu    sync.Mutex
	work  int64 // calibrated; 0 until the first runner booted
	seq   int
	names map[int]string // QEMU pid -> domain name
}

// Watcher watches a domain whose vCPU i runs on host thread tids[i],
// limited to quotaUS per periodUS (0: no limit), from Watch until Unwatch,
// which comes before the domain is destroyed.
type Watcher interface {
	Watch(domain string, tids []int, quotaUS, periodUS int64) error
	Unwatch(domain string)
}

// HintPublisher is a Watcher that publishes the watched domain's hint
// page into Path(domain), the file the backend made and QEMU maps (in
// place: a new file would not reach the guest).
type HintPublisher interface {
	Watcher
	Path(domain string) string
}

// watchers are the runner's Hints and Mitigation, each once.
func (b *Backend) watchers() []Watcher {
	var ws []Watcher
	if b.Hints != nil {
		ws = append(ws, b.Hints)
	}
	if b.Mitigation != nil && (b.Hints == nil || b.Mitigation != b.Hints) {
		ws = append(ws, b.Mitigation)
	}
	return ws
}

var (
	_ backend.Backend          = (*Backend)(nil)
	_ backend.IsolationChecker = (*Backend)(nil)
)

// Name returns "libvirt".
func (*Backend) Name() string { return "libvirt" }

// CanIsolate: <cputune> quotas work wherever libvirt runs.
func (*Backend) CanIsolate() error { return nil }

// namePrefix starts the name of every domain a run with this pid makes.
func namePrefix(pid int) string { return fmt.Sprintf("vgpu-probe-run-%d-", pid) }

// DomainName returns the name of the domain whose QEMU has pid, for the
// agent, which finds domains by name.
func (b *Backend) DomainName(pid int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.names[pid]
}

// Check says in one line what is missing for this backend to run here:
// the image, or libvirtd. Nothing is created.
func (b *Backend) Check() error {
	if _, err := vmimages.Find(b.imageDir()); err != nil {
		return err
	}
	l, err := dial(b.URI, connectTimeout)
	if err != nil {
		return err
	}
	l.Disconnect()
	return nil
}

func (b *Backend) imageDir() string {
	if b.ImageDir != "" {
		return b.ImageDir
	}
	return vmimages.DefaultDir()
}

func (b *Backend) domainType() string {
	if b.Type != "" {
		return b.Type
	}
	t, _ := vmimages.ProbeType()
	return t
}

func (b *Backend) logf(format string, args ...any) {
	if b.Log != nil {
		b.Log(fmt.Sprintf(format, args...))
	}
}

func or(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// env is a created topology.
type env struct {
	b         *Backend
	l         *lv.Libvirt
	dir       string // channel sockets and console logs
	created   []string
	runner    *guestVM
	corunners []*guestVM
	shmem     string    // the runner's <shmem> file in /dev/shm; "" if none
	page      string    // the runner's hint page, made by the backend; "" if none
	watched   []Watcher // watching the runner, to be told when it goes
	offset    int64     // host CLOCK_MONOTONIC - the runner guest's
	once      sync.Once
	err       error
}

// Create boots the runner, calibrates its work (first time only), then
// boots the co-runners and waits until they all run. On error everything
// it made is destroyed.
func (b *Backend) Create(ctx context.Context, t backend.Topology, co backend.Load) (_ backend.Env, err error) {
	if co.Cmd != "" && len(t.Corunners) > 0 {
		return nil, errors.New("libvirt backend: co-runner commands are not supported (the guest runs while1, matmul or stream)")
	}
	if len(t.Corunners) > 0 && !corunner.Valid(co.Kind) {
		return nil, fmt.Errorf("unknown co-runner %q (want one of %v)", co.Kind, corunner.Kinds)
	}
	img, err := vmimages.Find(b.imageDir())
	if err != nil {
		return nil, err
	}
	l, err := dial(b.URI, connectTimeout)
	if err != nil {
		return nil, err
	}
	e := &env{b: b, l: l}
	defer func() {
		if err != nil {
			e.Destroy()
		}
	}()
	sweep(l)
	if e.dir, err = os.MkdirTemp("", namePrefix(os.Getpid())+"*"); err != nil {
		return nil, err
	}
	// QEMU runs as its own user and creates the sockets here.
	if err := os.Chmod(e.dir, 0o755); err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.seq++
	base := fmt.Sprintf("%s%d-", namePrefix(os.Getpid()), b.seq)
	b.mu.Unlock()
	if e.runner, err = e.boot(ctx, img, base+vmimages.RoleGPURunner, t.Runner, t.Period, job.Job{Kind: job.Serve}, true); err != nil {
		return nil, err
	}
	if e.offset, err = e.runner.clockOffset(ctx, or(b.BootTimeout, DefaultBootTimeout)); err != nil {
		return nil, err
	}
	if err := b.calibrate(ctx, e.runner); err != nil {
		return nil, err
	}
	for i, vm := range t.Corunners {
		g, err := e.boot(ctx, img, fmt.Sprintf("%s%s%d", base, vmimages.RoleCorunner, i+1), vm, t.Period, job.Job{Kind: job.Corunner, Corunner: co.Kind}, false)
		if err != nil {
			return nil, err
		}
		e.corunners = append(e.corunners, g)
		// Answering a ping stops the guest repeating its ready line.
		if _, err := g.do(ctx, job.Job{Kind: job.Ping}, or(b.BootTimeout, DefaultBootTimeout)); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// calibrate measures, once per Backend, how much host work takes HostWork
// in the runner guest: alone, before any co-runner exists.
func (b *Backend) calibrate(ctx context.Context, g *guestVM) error {
	b.mu.Lock()
	done := b.work > 0 || b.HostWork <= 0
	b.mu.Unlock()
	if done {
		return nil
	}
	r, err := g.do(ctx, job.Job{Kind: job.Calibrate, HostNs: int64(b.HostWork)}, or(b.BootTimeout, DefaultBootTimeout))
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.work = r.Work
	b.mu.Unlock()
	return nil
}

// boot creates one domain for vm, connects to its job channel and waits
// for the guest's ready line.
func (e *env) boot(ctx context.Context, img vmimages.Image, name string, vm backend.VM, period time.Duration, first job.Job, runner bool) (*guestVM, error) {
	t0 := time.Now()
	cmdline, err := first.Cmdline()
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(e.dir, name+".sock")
	g := &guestVM{name: name, serial: filepath.Join(e.dir, name+".console")}
	r := vmimages.Role{Name: name, Image: img, Type: e.b.domainType(), CPUs: vm.CPUs, Job: cmdline,
		Channel: &vmimages.Channel{Socket: sock, Name: job.PortName}, SerialLog: g.serial}
	if vm.QuotaCPUs > 0 {
		// <quota> is per vCPU; the VM's share is spread over its vCPUs.
		r.PeriodUS = period.Microseconds()
		r.QuotaUS = max(1000, int64(math.Round(float64(r.PeriodUS)*vm.QuotaCPUs/float64(len(vm.CPUs)))))
	}
	d := vmimages.Corunner(r)
	if runner {
		args, err := e.runnerPage(name)
		if err != nil {
			return nil, err
		}
		d = vmimages.GPURunner(r, e.runnerShmem(), args, e.b.HostDevs)
		if d.Shmem != nil {
			e.shmem = d.Shmem.Name
		}
	}
	x, err := vmimages.Render(d)
	if err != nil {
		return nil, err
	}
	dom, err := e.l.DomainCreateXML(x, 0)
	if err != nil {
		return nil, fmt.Errorf("create domain %s: %w", name, err)
	}
	e.created = append(e.created, name)
	if err := g.connect(sock); err != nil {
		return nil, err
	}
	// Kept before the guest answers, so that a failure below still closes it.
	if runner {
		e.runner = g
	}
	if _, err := g.wait(ctx, 0, job.TypeReady, or(e.b.BootTimeout, DefaultBootTimeout), "ready line (vm-job)"); err != nil {
		g.close()
		return nil, err
	}
	if err := g.readThreads(e.l, dom); err != nil {
		g.close()
		return nil, err
	}
	if runner {
		for _, w := range e.b.watchers() {
			if err := w.Watch(name, g.tids, r.QuotaUS, r.PeriodUS); err != nil {
				g.close()
				return nil, err
			}
			e.watched = append(e.watched, w)
		}
	}
	e.b.logf("domain %s up in %.1fs (%s, vCPUs on CPUs %v)", name, time.Since(t0).Seconds(), d.Type, vm.CPUs)
	e.b.mu.Lock()
	if e.b.names == nil {
		e.b.names = map[int]string{}
	}
	e.b.names[g.pid] = name
	e.b.mu.Unlock()
	return g, nil
}

// runnerShmem is the runner's <shmem> device: none when the backend
// publishes hint pages (runnerPage's device replaces it).
func (e *env) runnerShmem() *vmimages.Shmem {
	if e.b.Hints != nil {
		return nil
	}
	return e.b.Shmem
}

// runnerPage makes the hint page of runner domain name, when the backend
// publishes pages, before the domain starts (hints.PreparePage: 0600,
// owned by libvirt's QEMU user from its creation, in the agent's
// directory, where no other user can make or open it) and returns the
// QEMU arguments of its ivshmem device; nil without Hints.
func (e *env) runnerPage(name string) ([]string, error) {
	if e.b.Hints == nil {
		return nil, nil
	}
	uid, gid, err := qemuOwner(e.l, e.b.domainType())
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(e.b.Hints.Path(name))
	path, err := hints.PreparePage(dir, name, uid, gid)
	if err != nil {
		return nil, fmt.Errorf("hint page of %s: %w", name, err)
	}
	e.page = path
	return hintpage.LibvirtArgs(dir, name), nil
}

// Run runs the loop in the runner guest. The result is the guest's, with
// the runner's vCPU threads as the host sees them (TIDs) and its start on
// the host's clock (StartNs), so the agent's timelines line up with it.
func (e *env) Run(ctx context.Context, w backend.Workload, started func(pid int)) (results.Result, error) {
	if w.Cmd != "" {
		return results.Result{}, errors.New("libvirt backend: workload commands are not supported (the guest runs the built-in loop)")
	}
	if w.Device != "sim" {
		return results.Result{}, fmt.Errorf("libvirt backend: device %q: the guest has the simulated GPU only", w.Device)
	}
	j := job.Job{Kind: job.Loop, Config: w.Config, Mode: w.Mode}
	if e.b.Hints != nil {
		j.Threshold = workload.ThresholdHints
	}
	e.b.mu.Lock()
	if e.b.work > 0 {
		j.Config.Work = e.b.work
	}
	e.b.mu.Unlock()
	if started != nil {
		started(e.runner.pid)
	}
	rep, err := e.runner.do(ctx, j, or(e.b.JobTimeout, DefaultJobTimeout))
	if err != nil {
		return results.Result{}, err
	}
	if rep.Result == nil {
		return results.Result{}, fmt.Errorf("domain %s: loop reply without a result", e.runner.name)
	}
	r := *rep.Result
	r.TIDs = append([]int(nil), e.runner.tids...)
	if r.StartNs != 0 {
		r.StartNs += e.offset
	}
	if w.Hold != nil {
		w.Hold()
	}
	return r, nil
}

// Gaps runs the guest's own discontinuity probe on the runner for d and
// returns what each vCPU saw, with StartNs/EndNs on the host's clock.
func (e *env) Gaps(ctx context.Context, d time.Duration) ([]job.VCPUGaps, error) {
	rep, err := e.runner.do(ctx, job.Job{Kind: job.Gaps, Seconds: d.Seconds()}, d+or(e.b.JobTimeout, DefaultJobTimeout))
	if err != nil {
		return nil, err
	}
	for i := range rep.Gaps {
		rep.Gaps[i].StartNs += e.offset
		rep.Gaps[i].EndNs += e.offset
	}
	return rep.Gaps, nil
}

// Command runs a command job in the runner guest (job.Command: argv
// with env added to the guest's environment, and file sent back) and
// returns what it did; a command that exits non-zero is a result, not an
// error.
func (e *env) Command(ctx context.Context, argv, env []string, file string) (*job.CommandResult, error) {
	rep, err := e.runner.do(ctx, job.Job{Kind: job.Command, Argv: argv, Env: env, File: file}, or(e.b.JobTimeout, DefaultJobTimeout))
	if err != nil {
		return nil, err
	}
	if rep.Command == nil {
		return nil, fmt.Errorf("domain %s: command reply without a result", e.runner.name)
	}
	return rep.Command, nil
}

// Corunners returns the co-runner domains' QEMU pids.
func (e *env) Corunners() []int {
	var pids []int
	for _, g := range e.corunners {
		pids = append(pids, g.pid)
	}
	return pids
}

// Domains returns the names of the runner's domain and the co-runners'.
func (e *env) Domains() (string, []string) {
	var co []string
	for _, g := range e.corunners {
		co = append(co, g.name)
	}
	return e.runner.name, co
}

// VCPUThreads returns the host thread ids of the runner's vCPUs.
func (e *env) VCPUThreads() []int { return append([]int(nil), e.runner.tids...) }

// Destroy destroys every domain Create made and removes its files.
func (e *env) Destroy() error {
	e.once.Do(func() {
		var errs []error
		for _, g := range append([]*guestVM{e.runner}, e.corunners...) {
			if g != nil {
				g.close()
			}
		}
		for _, w := range e.watched {
			w.Unwatch(e.runner.name)
		}
		for _, name := range e.created {
			if err := destroy(e.l, e.b.URI, name); err != nil {
				errs = append(errs, err)
			}
		}
		if e.shmem != "" && len(e.created) > 0 {
			// QEMU makes the backing file; libvirt leaves it behind.
			os.Remove(filepath.Join("/dev/shm", e.shmem))
		}
		if e.page != "" {
			// Made by runnerPage; the publisher left it to QEMU,
			// which held it until destroyed.
			os.Remove(e.page)
		}
		if e.dir != "" {
			if err := os.RemoveAll(e.dir); err != nil {
				errs = append(errs, err)
			}
		}
		e.l.Disconnect()
		e.err = errors.Join(errs...)
	})
	return e.err
}

// destroy destroys a domain by name if it still runs, through l or, when
// that connection is gone (libvirtd restarted), a new one.
func destroy(l *lv.Libvirt, uri, name string) error {
	try := func(l *lv.Libvirt) error {
		dom, err := l.DomainLookupByName(name)
		if err == nil {
			err = l.DomainDestroy(dom)
		}
		if err != nil && !isNoDomain(err) {
			return err
		}
		return nil
	}
	if try(l) == nil {
		return nil
	}
	l2, err := dial(uri, connectTimeout)
	if err != nil {
		return fmt.Errorf("destroy domain %s: %w", name, err)
	}
	defer l2.Disconnect()
	if err := try(l2); err != nil {
		return fmt.Errorf("destroy domain %s: %w", name, err)
	}
	return nil
}

// sweep destroys the domains, and removes the files, of runs that were
// killed without a chance to clean up: vgpu-probe-run-PID-* whose PID is
// gone.
func sweep(l *lv.Libvirt) {
	doms, _, err := l.ConnectListAllDomains(1, lv.ConnectListDomainsActive)
	if err == nil {
		for _, d := range doms {
			if stale(d.Name) {
				l.DomainDestroy(d)
			}
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "vgpu-probe-run-*"))
	for _, d := range dirs {
		if stale(filepath.Base(d)) {
			os.RemoveAll(d)
		}
	}
}

func stale(name string) bool {
	rest, ok := strings.CutPrefix(name, "vgpu-probe-run-")
	if !ok {
		return false
	}
	p, _, _ := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(p)
	if err != nil || pid <= 0 || pid == os.Getpid() {
		return false
	}
	_, err = os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err != nil
}
