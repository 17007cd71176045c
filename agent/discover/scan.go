package discover

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/libvirt"
	"github.com/vgpu-probe/vgpu-probe/agent/targets"
	"github.com/vgpu-probe/vgpu-probe/cgroups"
)

// VM is one VM process found on the host.
type VM struct {
	PID        int
	Hypervisor Hypervisor
	// Name is what the hypervisor calls the VM (see the package doc);
	// "HYPERVISOR-PID" where it gives it none.
	Name string
	// Namespace and VMI are set for a KubeVirt VM (Name is NAMESPACE/VMI).
	Namespace, VMI string
	// Libvirt: a libvirtd started this QEMU (its monitor is libvirt's).
	Libvirt bool
	// VCPUs are the vCPU threads, sorted by index.
	VCPUs []targets.Thread
	// ByQMP: the vCPU threads came from QMP's query-cpus-fast rather than
	// thread names.
	ByQMP bool
	// PeriodUS and QuotaUS are the CPU bandwidth limit of the first vCPU
	// thread's cgroup (libvirt's vcpuN cgroups limit each vCPU); 0: none.
	PeriodUS, QuotaUS int64
}

// Target is the VM as the agent watches it: a target of kind domain, as
// a libvirt domain is, with QEMU's main thread (its main loop runs the
// emulated timers and devices) as a helper.
func (v VM) Target() targets.Target {
	t := targets.Target{Kind: targets.KindDomain, Name: v.Name, Threads: slices.Clone(v.VCPUs), PeriodUS: v.PeriodUS, QuotaUS: v.QuotaUS}
	if v.Hypervisor == QEMU {
		t.Helpers = []int{v.PID}
	}
	return t
}

// Options configure a Scanner (and a Source).
type Options struct {
	// ProcRoot is the proc file system to read ("" is /proc). Pinning and
	// bandwidth are read only from the real one.
	ProcRoot string
	// QMPTimeout bounds one QMP query (default 1 s).
	QMPTimeout time.Duration
	// Every is a Source's scan period; at least MinEvery.
	Every time.Duration
	// Trust says whose processes are VMs; nil is DefaultTrust.
	Trust *Trust
	// Untrusted, when set, is told after each scan how many processes
	// named like a hypervisor were not trusted (the agent's gauge).
	Untrusted func(n int)
	// Limited, when set, counts each time a bound cut what was
	// discovered: LimitVMs, LimitVCPUs, LimitName or LimitCmdline.
	Limited func(limit string)
	Log     zerolog.Logger
}

// Bounds on what discovery adopts, so that no host, however many VMs or
// vCPU threads it runs, grows the agent's memory, pages or series past
// what docs/agent.md budgets. A trusted hypervisor seldom comes near
// them; each cut is counted (Options.Limited) and logged once.
const (
	MaxVMs     = 512  // VMs adopted at once; later ones wait for a slot
	MaxVCPUs   = 1024 // vCPUs watched per VM, the lowest indices
	MaxNameLen = 128  // bytes of a VM name (the domain label and page file)

	LimitVMs     = "vms"
	LimitVCPUs   = "vcpus"
	LimitName    = "name"
	LimitCmdline = "cmdline" // a trusted process's command line past maxCmdline
)

// qmpRefresh: without vCPU thread names nothing tells that QEMU added a
// vCPU (hotplug), so QMP is asked again this often; after failures (a
// QEMU still starting, another client on the socket) the wait doubles
// from one scan up to it. quietScans: a process is reported as not a VM
// only after this many scans, so a QEMU still starting is not.
const (
	qmpRefresh = 30 * time.Second
	quietScans = 3
)

// Scanner finds the VM processes under a proc file system. It remembers
// what it read about each trusted process (its identity from the command
// line, its vCPU threads' names) for as long as the process lives, so
// that a scan of a host whose processes have not changed reads little
// more than the list of processes and their executables. Of a process
// it does not trust it keeps what tells the process apart and why it
// is not trusted, nothing its user wrote: any user may start thousands
// of processes with 6 MiB command lines.
type Scanner struct {
	root       string
	real       bool
	qmpTimeout time.Duration
	log        zerolog.Logger
	trust      Trust
	untrusted  func(int)
	limited    func(string)
	online     []int
	procs      map[int]*proc
	now        func() time.Time
}

// proc is what a Scanner knows about one hypervisor process. From start
// to cut it is the process's identity and trust, all that is kept of
// one not trusted; the rest is read once it is trusted (read).
type proc struct {
	start   string // starttime in /proc/PID/stat: tells a reused pid apart
	hv      Hypervisor
	inPod   bool            // in a Kubernetes pod's cgroup (Trust.PodUIDs)
	inKube  bool            // in a cgroup under some kubepods (a KubeVirt name)
	exeErr  error           // why its executable is not trusted; nil: it is
	trusted bool            // as of the last scan (logged when it changes)
	cut     map[string]bool // the bounds this process was cut by (counted once)

	read     bool // its command line was read (it was trusted then)
	id       identity
	ns, vmi  string
	vcpuTIDs map[int]int // tid -> vCPU index, from thread names
	qmp      []libvirt.VCPU
	qmpNamed map[int]int // vcpuTIDs as they were at the last QMP answer
	qmpAt    time.Time
	qmpErr   string // the last QMP failure logged
	qmpFails int    // QMP failures in a row
	noVCPUs  int    // scans without vCPU threads in a row
}

// NewScanner returns a Scanner of o.ProcRoot.
func NewScanner(o Options) *Scanner {
	s := &Scanner{root: o.ProcRoot, qmpTimeout: o.QMPTimeout, log: o.Log, procs: map[int]*proc{}, now: time.Now,
		untrusted: o.Untrusted, limited: o.Limited}
	if o.Trust != nil {
		s.trust = *o.Trust
	} else {
		s.trust = DefaultTrust()
	}
	if s.limited == nil {
		s.limited = func(string) {}
	}
	if s.root == "" {
		s.root = "/proc"
	}
	s.real = filepath.Clean(s.root) == "/proc"
	if s.qmpTimeout <= 0 {
		s.qmpTimeout = time.Second
	}
	if s.real {
		if b, err := readBounded("/sys/devices/system/cpu/online", maxStat); err == nil {
			s.online = parseCPUList(strings.TrimSpace(string(b)))
		}
	}
	return s
}

// Scan lists the VM processes now, sorted by pid.
func (s *Scanner) Scan() ([]VM, error) {
	ents, err := os.ReadDir(s.root)
	if err != nil {
		return nil, fmt.Errorf("listing processes in %s: %w", s.root, err)
	}
	var out []VM
	untrusted := 0
	seen := make(map[int]bool, len(s.procs))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		hv, ok := s.classify(pid)
		if !ok {
			continue
		}
		dir := filepath.Join(s.root, e.Name())
		start, err := startTime(dir)
		if err != nil {
			continue // exited
		}
		p := s.procs[pid]
		if p == nil || p.start != start || p.hv != hv {
			p = s.newProc(dir, hv, start)
			s.procs[pid] = p
		}
		seen[pid] = true
		if !s.trusted(pid, dir, p) {
			untrusted++
			continue
		}
		if !p.read && s.readIdentity(pid, dir, p) != nil {
			continue // exited
		}
		if vm, ok := s.describe(pid, dir, p); ok {
			out = append(out, vm)
		}
	}
	for pid := range s.procs {
		if !seen[pid] {
			delete(s.procs, pid)
		}
	}
	if s.untrusted != nil {
		s.untrusted(untrusted)
	}
	return out, nil
}

// trusted applies s.trust to a hypervisor process; nothing more is read
// from one it does not trust (no command line, no thread names, no
// QMP), and what was read while it was (before its uids changed) is
// dropped. A change is logged at debug level only: a user can start and
// stop such processes at will, and must not be able to fill the log.
func (s *Scanner) trusted(pid int, dir string, p *proc) bool {
	err := p.exeErr
	if err == nil {
		err = s.trust.checkOwner(dir, p.inPod)
	}
	if ok := err == nil; ok != p.trusted {
		p.trusted = ok
		if !ok {
			p.forget()
			s.log.Debug().Int("pid", pid).Str("hypervisor", string(p.hv)).Str("why", err.Error()).
				Msg("process named like a hypervisor is not trusted: not watched")
		}
	}
	return p.trusted
}

// classify tells whether a process runs a hypervisor, by its executable
// (or, where the agent may not read that link, the comm the process
// started with). Kernel threads have no executable.
func (s *Scanner) classify(pid int) (Hypervisor, bool) {
	dir := filepath.Join(s.root, strconv.Itoa(pid))
	exe, err := os.Readlink(filepath.Join(dir, "exe"))
	if err == nil {
		return hypervisorOf(exe)
	}
	if !errors.Is(err, os.ErrPermission) {
		return "", false
	}
	b, err := readBounded(filepath.Join(dir, "comm"), maxComm)
	if err != nil {
		return "", false
	}
	return hypervisorOf(strings.TrimSpace(string(b)))
}

// startTime is field 22 of /proc/PID/stat, after the comm in parentheses
// (which may hold spaces and parentheses itself).
func startTime(dir string) (string, error) {
	b, err := readBounded(filepath.Join(dir, "stat"), maxStat)
	if err != nil {
		return "", err
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return "", errors.New("stat without comm")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return "", errors.New("short stat")
	}
	return strings.Clone(f[19]), nil
}

// newProc is what decides whether a process is trusted: its cgroup (a
// pod's?) and its executable. Nothing its user wrote is read yet.
func (s *Scanner) newProc(dir string, hv Hypervisor, start string) *proc {
	p := &proc{start: start, hv: hv}
	// A cgroup file past its bound is no pod's: the kubelet's paths are
	// short.
	if cg, err := readBounded(filepath.Join(dir, "cgroup"), maxCgroup); err == nil {
		ms := cgroups.Parse(cg)
		p.inPod = inPodCgroup(ms)
		_, p.inKube = podUID(ms)
	}
	p.exeErr = checkExecutable(dir)
	p.trusted = true // so that a first scan that does not trust it logs why
	return p
}

// readIdentity reads the command line of a trusted process: its name and
// QMP socket, kept bounded and copied. A command line past maxCmdline is
// read up to it (the last argument it cuts dropped), counted and logged
// once.
func (s *Scanner) readIdentity(pid int, dir string, p *proc) error {
	b, err := readBounded(filepath.Join(dir, "cmdline"), maxCmdline)
	if errors.Is(err, errTooLong) {
		if !p.cut[LimitCmdline] {
			s.cutOnce(pid, p, LimitCmdline, maxCmdline, "hypervisor command line longer than discovery reads: a name or QMP socket after the cut is not seen")
		}
		if i := bytes.LastIndexByte(b, 0); i >= 0 {
			b = b[:i+1]
		}
	} else if err != nil {
		return err
	}
	p.id = parseIdentity(p.hv, splitCmdline(b))
	if p.inKube && p.hv == QEMU {
		p.ns, p.vmi, _ = kubevirtName(p.id.name)
	}
	p.vcpuTIDs = map[int]int{}
	p.read = true
	return nil
}

// forget drops all but the identity and trust of a process that is no
// longer trusted.
func (p *proc) forget() {
	*p = proc{start: p.start, hv: p.hv, inPod: p.inPod, inKube: p.inKube, exeErr: p.exeErr, cut: p.cut}
}

// describe reads a hypervisor process's vCPU threads; ok is false when it
// has none (then it is not a VM, or not one this package can watch).
func (s *Scanner) describe(pid int, dir string, p *proc) (VM, bool) {
	taskDir := filepath.Join(dir, "task")
	ents, err := os.ReadDir(taskDir)
	if err != nil {
		return VM{}, false
	}
	alive := make(map[int]bool, len(ents))
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		alive[tid] = true
		if _, ok := p.vcpuTIDs[tid]; ok {
			continue // a thread keeps the name its hypervisor gave it
		}
		// A thread not (yet) named as a vCPU is read again next scan: the
		// hypervisor names a new thread just after creating it.
		b, err := readBounded(filepath.Join(taskDir, e.Name(), "comm"), maxComm)
		if err != nil {
			continue
		}
		if i, ok := vcpuIndex(p.hv, strings.TrimSuffix(string(b), "\n")); ok {
			p.vcpuTIDs[tid] = i
		}
	}
	for tid := range p.vcpuTIDs {
		if !alive[tid] {
			delete(p.vcpuTIDs, tid)
		}
	}

	vm := VM{PID: pid, Hypervisor: p.hv, Name: p.id.name, Namespace: p.ns, VMI: p.vmi, Libvirt: p.id.libvirt}
	if p.hv == QEMU && p.id.qmp != "" {
		s.refreshQMP(pid, p, alive)
	}
	if p.qmp != nil {
		vm.ByQMP = true
		for _, v := range p.qmp {
			vm.VCPUs = append(vm.VCPUs, targets.Thread{TID: v.TID, VCPU: v.Index})
		}
	} else {
		byIndex := map[int]int{}
		for tid, i := range p.vcpuTIDs {
			if old, dup := byIndex[i]; !dup || tid < old {
				byIndex[i] = tid
			}
		}
		for i, tid := range byIndex {
			vm.VCPUs = append(vm.VCPUs, targets.Thread{TID: tid, VCPU: i})
		}
		slices.SortFunc(vm.VCPUs, func(a, b targets.Thread) int { return a.VCPU - b.VCPU })
	}
	if len(vm.VCPUs) == 0 {
		if p.noVCPUs++; p.noVCPUs == quietScans {
			s.log.Info().Int("pid", pid).Str("hypervisor", string(p.hv)).
				Msg("hypervisor process without vCPU threads: not watched (QEMU needs -name debug-threads=on or a QMP socket on its command line)")
		}
		return VM{}, false
	}
	p.noVCPUs = 0
	if len(vm.VCPUs) > MaxVCPUs {
		if !p.cut[LimitVCPUs] {
			s.cutOnce(pid, p, LimitVCPUs, MaxVCPUs, "VM has more vCPU threads than are watched per VM: the lowest indices are")
		}
		slices.SortFunc(vm.VCPUs, func(a, b targets.Thread) int { return a.VCPU - b.VCPU })
		vm.VCPUs = vm.VCPUs[:MaxVCPUs]
	}
	switch {
	case p.vmi != "":
		vm.Name = p.ns + "/" + p.vmi
	case vm.Name == "":
		vm.Name = string(p.hv) + "-" + strconv.Itoa(pid)
	}
	if len(vm.Name) > MaxNameLen {
		if !p.cut[LimitName] {
			s.cutOnce(pid, p, LimitName, MaxNameLen, "VM name longer than the label bound: cut")
		}
		vm.Name = strings.ToValidUTF8(vm.Name[:MaxNameLen], "")
	}
	if s.real {
		s.tuning(&vm)
	}
	return vm, true
}

// cutOnce counts and logs, once for the life of a process, that a bound
// (its value bound) cut what it describes.
func (s *Scanner) cutOnce(pid int, p *proc, limit string, bound int, msg string) {
	if p.cut == nil {
		p.cut = map[string]bool{}
	}
	p.cut[limit] = true
	s.limited(limit)
	s.log.Warn().Int("pid", pid).Str("limit", limit).Int("bound", bound).Msg(msg)
}

// refreshQMP asks QEMU's QMP socket for the vCPU threads when it has no
// answer yet, when a vCPU thread it named has gone or the named vCPU
// threads changed, and every qmpRefresh without names. A failure keeps
// the thread names (where QEMU gives them) and is logged once.
func (s *Scanner) refreshQMP(pid int, p *proc, alive map[int]bool) {
	now := s.now()
	need := p.qmp == nil || !mapsEqual(p.qmpNamed, p.vcpuTIDs) || (len(p.vcpuTIDs) == 0 && now.Sub(p.qmpAt) >= qmpRefresh)
	for _, v := range p.qmp {
		need = need || !alive[v.TID]
	}
	if !need || (p.qmp == nil && p.qmpFails > 0 && now.Sub(p.qmpAt) < min(MinEvery<<(p.qmpFails-1), qmpRefresh)) {
		return
	}
	p.qmpAt = now
	sock, err := socketFor(filepath.Join(s.root, strconv.Itoa(pid)), p.id.qmp)
	var v []libvirt.VCPU
	if err == nil {
		v, err = queryVCPUs(sock, p.id.qmp, pid, s.qmpTimeout)
		sock.Close()
	}
	if err == nil {
		for _, c := range v {
			if !alive[c.TID] {
				err = fmt.Errorf("QMP names thread %d, not a thread of process %d", c.TID, pid)
				break
			}
		}
	}
	if err != nil {
		p.qmp = nil
		// The first failure is often a QEMU that has not opened its
		// socket yet.
		if p.qmpFails++; p.qmpFails > 1 && err.Error() != p.qmpErr {
			s.log.Warn().Err(err).Int("pid", pid).Msg("QEMU's QMP socket did not give the vCPU threads; using thread names where QEMU sets them")
			p.qmpErr = err.Error()
		}
		return
	}
	p.qmp, p.qmpErr, p.qmpFails = v, "", 0
	p.qmpNamed = make(map[int]int, len(p.vcpuTIDs))
	for k, x := range p.vcpuTIDs {
		p.qmpNamed[k] = x
	}
}

// tuning reads the pinning (the threads' affinity) and the bandwidth
// limit of the first vCPU thread's cgroup.
func (s *Scanner) tuning(vm *VM) {
	for i := range vm.VCPUs {
		var set unix.CPUSet
		if unix.SchedGetaffinity(vm.VCPUs[i].TID, &set) != nil {
			continue
		}
		var cpus []int
		for c := 0; c < len(set)*64; c++ {
			if set.IsSet(c) {
				cpus = append(cpus, c)
			}
		}
		if !containsAll(cpus, s.online) {
			vm.VCPUs[i].CPUs = cpus
		}
	}
	b, err := readBounded(filepath.Join(s.root, strconv.Itoa(vm.PID), "task", strconv.Itoa(vm.VCPUs[0].TID), "cgroup"), maxCgroup)
	if err != nil {
		return
	}
	path, ok := cpuCgroup(cgroups.Parse(b))
	if !ok {
		return
	}
	dir, err := targets.ResolveCgroup(strings.TrimPrefix(path, "/"))
	if err != nil {
		return
	}
	q, per := cgroups.Quota(dir)
	vm.QuotaUS, vm.PeriodUS = q.Microseconds(), per.Microseconds()
}

// cpuCgroup is the path of the cgroup that holds the cpu controller: v1's
// cpu hierarchy where there is one, else the unified one.
func cpuCgroup(ms []cgroups.Membership) (string, bool) {
	for _, m := range ms {
		if m.Has("cpu") {
			return m.Path, true
		}
	}
	for _, m := range ms {
		if m.Unified() {
			return m.Path, true
		}
	}
	return "", false
}

// containsAll reports whether have holds every CPU of want (true when
// the online CPUs are unknown: then nothing counts as pinned).
func containsAll(have, want []int) bool {
	for _, c := range want {
		if !slices.Contains(have, c) {
			return false
		}
	}
	return true
}

func mapsEqual(a, b map[int]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// parseCPUList reads a kernel CPU list ("0-3,8"); a part that does not
// parse is skipped.
func parseCPUList(s string) []int {
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			continue
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b-a > 1<<16 {
				continue
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out
}
