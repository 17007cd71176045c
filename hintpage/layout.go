package hintpage

import (
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"
)

// Format constants. Every multi-byte field is little-endian; every 64-bit
// field is 8-byte aligned so it can be read and written atomically in
// place.
const (
	Magic   uint32 = 0x50484756 // "VGHP" in little-endian byte order
	Version uint16 = 2

	HeaderSize = 64 // bytes before the first slot
	// SlotSize: two cache lines per slot, one per writer: the estimate
	// block (the agent's user space) and the live block (the kernel's BPF
	// programs at each switch of the thread), so that the writers of two
	// blocks never share a line.
	SlotSize = 128
	// LiveOffset is where a slot's live block starts.
	LiveOffset = 64
	// MaxSlots bounds what a reader accepts: the 1 MiB ivshmem region
	// holds 8191 slots, far beyond any VM's vCPU count.
	MaxSlots = 8191
	// PageAlign: files are rounded up to whole 4 KiB pages.
	PageAlign = 4096
)

// Clock ids (Header.Clock): what the slot times are expressed in.
const (
	// ClockMonotonic: the publisher's CLOCK_MONOTONIC in ns. For a local
	// target it is the reader's clock too; a guest must calibrate it
	// (see docs/hints.md "Clock").
	ClockMonotonic uint32 = 1
)

// Header flags.
const (
	// FlagVCPU: slot i is vCPU i of a VM; slots are found by the CPU the
	// reading thread runs on. Without it slots belong to threads and are
	// found by Slot.TID.
	FlagVCPU uint32 = 1 << 0
)

// Slot states.
const (
	StateUnknown   uint8 = 0 // not yet seen by the publisher
	StateRunning   uint8 = 1 // on a CPU since SwitchInNs
	StatePreempted uint8 = 2 // off its CPU while runnable (preempted or throttled)
	StateSleeping  uint8 = 3 // off its CPU, not runnable
)

// Run-queue contention of a slot, as the publisher judged it from the last
// preemptions and throttles it saw.
const (
	ContUnknown   uint8 = 0
	ContFree      uint8 = 1 // nothing else competes for its CPUs
	ContThrottled uint8 = 2 // a bandwidth quota takes its CPU away
	ContShared    uint8 = 3 // other runnable tasks share its CPUs
)

// Infinite in ExpectedSliceNs or RemainingNs: nothing is expected to take
// the CPU away.
const Infinite uint64 = 1<<64 - 1

// Header byte offsets.
const (
	offMagic      = 0  // u32
	offVersion    = 4  // u16
	offHeaderSize = 6  // u16
	offSlotSize   = 8  // u16
	offSlots      = 12 // u32 number of slots
	offClock      = 16 // u32 clock id
	offFlags      = 20 // u32
	offClockOff   = 24 // i64 publisher-clock offset added to slot times (0 today)
	offHeartbeat  = 32 // u64 publisher clock at the last refresh of any slot
	offTotalSize  = 40 // u32 bytes the publisher sized the page to
)

// Slot byte offsets, from the slot's start. The estimate block (0..63)
// is written by the agent's user space every refresh and when its
// estimate changes; the live block (64..127) at every switch of the
// thread, by the BPF programs (or by the agent where they cannot write).
// Each has its own seqlock.
const (
	offSeq      = 0  // u32 estimate seqlock: odd while the writer is inside
	offTID      = 4  // u32 thread id (thread slots) or 0
	offSlice    = 8  // u64 expected run length when shared (0: unknown, Infinite: free)
	offPublish  = 16 // u64 when the estimate was written
	offQuota    = 24 // u32 bandwidth quota µs per period (0: none)
	offPeriod   = 28 // u32 bandwidth period µs (0: none)
	offCont     = 32 // u8 contention
	offEstFlags = 33 // u8 EstQuotaBound, EstTickPhase
	offTick     = 36 // u32 scheduler tick ns (0: unknown)
	offPhase    = 40 // u32 phase of the quota throttles in the tick, ns
	// offMitigation: u32 the EEVDF slice (ns) the agent's --mitigate gave
	// the thread, 0: none. It was reserved (0) before, so a page written
	// without it reads as "not mitigated" and the version stays 2.
	offMitigation = 44
	offQuotaRun   = 48 // u64 a run's length under the quota without kernel state (0: unknown)

	offLiveSeq   = LiveOffset + 0  // u32 live seqlock
	offState     = LiveOffset + 4  // u8
	offLiveFlags = LiveOffset + 5  // u8 LiveKernel
	offCPU       = LiveOffset + 6  // u16 host CPU of the last switch-in
	offSwitchIn  = LiveOffset + 8  // u64 last switch-in
	offSwitchOut = LiveOffset + 16 // u64 last switch-out (0: none seen)
	offQuotaEnd  = LiveOffset + 24 // u64 when the bandwidth quota runs out if the run goes on (0: none known)
	// LiveBodyOffset and LiveBodySize: what a live-block writer stores
	// between the two increments of the live seqlock.
	LiveBodyOffset = LiveOffset + 4
	LiveBodySize   = 28
)

// Estimate flags (Slot.EstFlags).
const (
	// EstQuotaBound: the current run is expected to end when the CPU
	// bandwidth quota runs out (the live block's QuotaEndNs, put on the
	// tick; QuotaRunNs after the switch-in when the live block has none).
	EstQuotaBound uint8 = 1 << 0
	// EstTickPhase: the quota throttles come at TickPhaseNs in the tick.
	EstTickPhase uint8 = 1 << 1
	estKnown           = EstQuotaBound | EstTickPhase
)

// Live flags (Slot.LiveFlags).
const (
	// LiveKernel: the live block was written by the BPF programs at the
	// switch itself (not by the agent's user space from their records).
	LiveKernel uint8 = 1 << 0
	liveKnown        = LiveKernel
)

// Size returns the file size of a page with n slots.
func Size(n int) int {
	s := HeaderSize + n*SlotSize
	return (s + PageAlign - 1) / PageAlign * PageAlign
}

// Slot is one vCPU's or thread's hint, as read from (or written to) the
// page. Times are in the page's clock, ns.
type Slot struct {
	// Estimate block (the agent's user space).
	TID         uint32
	SliceNs     uint64 // expected run length while shared (0: unknown; Infinite with ContFree)
	PublishNs   uint64
	QuotaUS     uint32
	PeriodUS    uint32
	Contention  uint8
	EstFlags    uint8
	TickNs      uint32
	TickPhaseNs uint32
	QuotaRunNs  uint64
	// MitigationNs: the short EEVDF slice the agent applied to this
	// thread (its --mitigate), ns; 0: none, or the thread has its CPU
	// to itself (Contention free). A blocked waiter's wake-up then
	// preempts the co-runner at once.
	MitigationNs uint32

	// Live block (the BPF programs at each switch).
	State       uint8
	LiveFlags   uint8
	CPU         uint16
	SwitchInNs  uint64
	SwitchOutNs uint64
	QuotaEndNs  uint64

	// ExpectedSliceNs is derived by ReadSlot from both blocks (never
	// stored): how long the run that began at SwitchInNs is expected to
	// last (0: not known; Infinite: nothing is expected to end it). See
	// Expected.
	ExpectedSliceNs uint64
}

// Header is the page's header as read.
type Header struct {
	Slots       int
	Clock       uint32
	Flags       uint32
	ClockOffset int64
	HeartbeatNs uint64
	TotalSize   int
}

// Errors the reader returns; each means "do not use the page (or slot)".
var (
	ErrMagic   = errors.New("hint page: bad magic (not a vgpu-probe hint page)")
	ErrVersion = errors.New("hint page: unsupported version")
	ErrSize    = errors.New("hint page: size does not match its header")
	ErrTorn    = errors.New("hint page: slot changed while being read")
	ErrStale   = errors.New("hint page: slot not refreshed recently")
	ErrAbsurd  = errors.New("hint page: slot holds impossible values")
	ErrNoSlot  = errors.New("hint page: no slot for this thread or CPU")
)

// littleEndian is checked once: the in-place atomic accesses use the
// machine's byte order, which must be the page's.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// FilePrefix starts every page file's name: DIR/vgpu-probe-hints-TARGET.
const FilePrefix = "vgpu-probe-hints-"

// FileName is the page file name of a target (a domain name, a pid, a
// cgroup path): FilePrefix and the name with every byte outside
// [A-Za-z0-9._-] replaced by '_', so that it is one file in DIR and needs
// no quoting anywhere (a QEMU option, a libvirt XML attribute).
func FileName(target string) string {
	b := []byte(target)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			b[i] = '_'
		}
	}
	if len(b) > 200 {
		b = b[:200]
	}
	return FilePrefix + string(b)
}

// GuestPath is where `vgpu-probe guest` exposes a VM's page inside the
// guest, and so what HYBRIDSYNC_HINTS names there.
const GuestPath = "/dev/shm/vgpu-probe-hints"

// ShmemSizeMiB is the ivshmem region a VM's page lives in: libvirt wants a
// power of two in MiB, and 1 MiB holds MaxSlots vCPUs.
const ShmemSizeMiB = 1

// LibvirtXML is the libvirt <qemu:commandline> element that maps the page
// of domain, in dir, into the guest as an ivshmem-plain PCI device
// (1af4:1110, BAR2): QEMUArgs, which the domain's root element must allow
// with xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'. Not
// libvirt's <shmem>: libvirt maps <shmem name='X'> from /dev/shm/X only
// (a name with '/' is refused), at the root of a directory every user may
// write, where another user can make the file before the agent does, and
// where QEMU makes it 0644 when it is missing.
func LibvirtXML(dir, domain string) string {
	var b strings.Builder
	b.WriteString("<qemu:commandline>")
	for _, a := range LibvirtArgs(dir, domain) {
		b.WriteString("<qemu:arg value='" + xmlEscape(a) + "'/>")
	}
	b.WriteString("</qemu:commandline>")
	return b.String()
}

// LibvirtArgs are QEMUArgs for a domain libvirt starts: the device in
// QEMU's JSON syntax, as libvirt gives its own. QEMU adds the devices of
// the other syntax first, so an ivshmem-plain in it would take the PCI
// slot libvirt gave one of its own devices (QEMU 7.2: "PCI: slot 2
// function 0 not available for virtio-serial-pci, in use by
// ivshmem-plain"); in the same syntax it comes after them, in a free one.
func LibvirtArgs(dir, domain string) []string {
	a := QEMUArgs(dir, domain)
	a[len(a)-1] = `{"driver":"ivshmem-plain","memdev":"vgpu-probe-hints"}`
	return a
}

// LibvirtNS is the namespace <qemu:commandline> needs on <domain>.
const LibvirtNS = "xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'"

// xmlEscape escapes s for an XML attribute in single quotes.
func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "'", "&apos;", `"`, "&quot;").Replace(s)
}

// DefaultDir is the agent's page directory: one the agent makes and owns
// (root, mode 0711: every user may reach a page by name, none but root
// may list, create, rename or remove one), in /run, where no other user
// can make it first. Each page in it is mode 0600 and owned by its
// reader (QEMU's user, a local target's user) from its creation on.
const DefaultDir = "/run/vgpu-probe/hints"

// QEMUArgs are the QEMU arguments that map the page of target, in dir,
// into the guest without libvirt: the same ivshmem-plain device as
// ShmemXML, over the page file shared with QEMU (share=on: the guest must
// see the agent's writes). The page must exist when QEMU starts
// (PrepareShared, `vgpu-probe agent hints-args`): QEMU opens a file that
// exists as it is and creates a missing one under its own umask (0644),
// which the agent then refuses (OpenShared).
func QEMUArgs(dir, target string) []string {
	const id = "vgpu-probe-hints"
	path := strings.ReplaceAll(filepath.Join(dir, FileName(target)), ",", ",,") // QEMU's option escape
	return []string{
		"-object", "memory-backend-file,id=" + id + ",mem-path=" + path + ",size=" + strconv.Itoa(ShmemSizeMiB) + "M,share=on",
		"-device", "ivshmem-plain,memdev=" + id,
	}
}
