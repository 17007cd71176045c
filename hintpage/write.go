package hintpage

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// Writer publishes slots into a page. One goroutine at a time may write a
// given slot (the seqlock has a single writer); distinct slots may be
// written concurrently.
type Writer struct {
	m     mem
	n     int
	f     *os.File
	path  string
	unmap func() error
}

// initWriter writes the header of a page with n slots into b (at least Size(n)
// bytes, zeroed) and returns a writer over it.
func initWriter(b []byte, n int, flags uint32) (*Writer, error) {
	if n <= 0 || n > MaxSlots {
		return nil, fmt.Errorf("hint page: %d slots: want 1 to %d", n, MaxSlots)
	}
	if len(b) < Size(n) {
		return nil, fmt.Errorf("%w: %d bytes for %d slots, need %d", ErrSize, len(b), n, Size(n))
	}
	m := mem(b)
	if uintptr(m.ptr(0))%8 != 0 {
		return nil, fmt.Errorf("hint page: buffer not 8-byte aligned")
	}
	m.setU32(offVersion, uint32(HeaderSize)<<16|uint32(Version))
	m.setU32(offSlotSize, SlotSize)
	m.setU32(offSlots, uint32(n))
	m.setU32(offClock, ClockMonotonic)
	m.setU32(offFlags, flags)
	m.setU64(offClockOff, 0)
	m.setU32(offTotalSize, uint32(Size(n)))
	// The magic last: a reader that sees it sees a complete header.
	m.setU32(offMagic, Magic)
	return &Writer{m: m, n: n}, nil
}

// Create makes a fresh page file at path for a local target: written in a
// temporary file of mode 0600 owned by uid:gid, then renamed into place,
// so a reader never maps a half-written header. A file already at path is
// replaced (readers re-open it when its inode changes).
func Create(path string, n int, flags uint32, uid, gid int) (*Writer, error) {
	if n <= 0 || n > MaxSlots {
		return nil, fmt.Errorf("hint page %s: %d slots: want 1 to %d", path, n, MaxSlots)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, fmt.Errorf("creating hint page in %s: %w", filepath.Dir(path), err)
	}
	w, err := setup(f, n, flags, uid, gid, Size(n))
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		if w != nil {
			w.unmap()
		}
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("creating hint page %s: %w", path, err)
	}
	w.path = path
	return w, nil
}

// PrepareShared makes the page file of a VM before its QEMU starts, for
// QEMU to open (it opens a file that exists without creating it): created
// exclusively (O_EXCL), never through a symlink, mode 0600 from the
// open on and owned by uid:gid (QEMU's user) through the descriptor, so
// that no other user can open it at any moment; then allocated to size
// bytes, what QEMU's memory-backend-file asks for (QEMU refuses a file
// shorter than its size=). A page that is there already is one the agent
// or an earlier PrepareShared made (the directory is the agent's alone):
// it is taken as it is, once it passes OpenShared's checks, and given to
// uid:gid. The header is the agent's to write, when it finds the VM.
func PrepareShared(path string, uid, gid, size int) error {
	if size < Size(1) || size > MaxSharedSize {
		return fmt.Errorf("hint page %s: %d bytes, want %d to %d", path, size, Size(1), MaxSharedSize)
	}
	f, err := openInPlace(path)
	if err != nil {
		return fmt.Errorf("creating hint page %s: %w", path, err)
	}
	defer f.Close()
	if err := checkShared(f, uid); err != nil {
		return fmt.Errorf("hint page %s: %w", path, err)
	}
	if err := prepare(f, uid, gid, size); err != nil {
		return fmt.Errorf("hint page %s: %w", path, err)
	}
	return nil
}

// OpenShared opens (or creates) the page file QEMU maps for a VM's
// ivshmem device. A file already there (QEMU's, created when the VM
// started, or the page an earlier agent published, which a running QEMU
// still maps) is opened in place, never replaced or shrunk: a new inode
// would not reach the guest, and QEMU would fault on a shorter file. Its
// header and first n slots are then written afresh in the same inode.
//
// The path is not trusted: it is opened without following a symlink and
// without blocking, and what was opened must be a regular file with one
// link (not a hard link to a file elsewhere), owned by root or by uid,
// mode 0600 or narrower, at most MaxSharedSize bytes; anything else is
// refused: a file another user planted, or one QEMU created itself
// (0644 under its umask), which any user who could reach it may have
// opened before the agent saw it and may read for as long as it keeps
// that descriptor. It is owned by uid:gid, QEMU's user, through the
// descriptor, never by path.
func OpenShared(path string, n int, flags uint32, uid, gid int, size int) (*Writer, error) {
	if size < Size(n) || size > MaxSharedSize {
		return nil, fmt.Errorf("hint page %s: %d bytes cannot hold %d slots (or exceed %d)", path, size, n, MaxSharedSize)
	}
	f, err := openInPlace(path)
	if err != nil {
		return nil, fmt.Errorf("opening hint page %s: %w", path, err)
	}
	if err := checkShared(f, uid); err != nil {
		f.Close()
		return nil, fmt.Errorf("hint page %s: %w", path, err)
	}
	w, err := setup(f, n, flags, uid, gid, size)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("hint page %s: %w", path, err)
	}
	w.path = path
	return w, nil
}

// MaxSharedSize bounds a page file OpenShared takes over: a VM's ivshmem
// region is ShmemSizeMiB; a larger file is not one the agent or
// hints-args sized.
const MaxSharedSize = 64 << 20

// openInPlace opens path read-write, creating it (mode 0600, so that no
// other user can open it at any moment) only if it does not exist
// (O_EXCL): O_CREAT on an existing file in a sticky directory writable by
// all is refused even to root where fs.protected_regular is on, as
// systemd sets it. Never through a symlink (O_NOFOLLOW: ELOOP), and
// without blocking on a FIFO someone put there.
func openInPlace(path string) (*os.File, error) {
	const flags = os.O_RDWR | syscall.O_NOFOLLOW | syscall.O_NONBLOCK
	for {
		f, err := os.OpenFile(path, flags, 0)
		if !errors.Is(err, fs.ErrNotExist) {
			return f, err
		}
		f, err = os.OpenFile(path, flags|os.O_CREATE|os.O_EXCL, 0o600)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
}

// ErrForeign: a file at a page's path that the agent must not publish
// into (not a regular file, another user's, hard-linked, oversized).
var ErrForeign = errors.New("not a page file the agent may publish into")

// checkShared checks what openInPlace opened (by its descriptor).
func checkShared(f *os.File, uid int) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	switch {
	case st.Mode&syscall.S_IFMT != syscall.S_IFREG:
		return fmt.Errorf("%w: not a regular file", ErrForeign)
	case st.Uid != 0 && int(st.Uid) != uid:
		return fmt.Errorf("%w: owned by uid %d, not root or %d", ErrForeign, st.Uid, uid)
	case st.Mode&0o077 != 0:
		return fmt.Errorf("%w: mode %#o, so not made by vgpu-probe (QEMU makes a missing page 0644), and another user may hold it open: remove it once no QEMU uses it, and make the page with `vgpu-probe agent hints-args` before QEMU starts", ErrForeign, st.Mode&0o7777)
	case st.Nlink != 1:
		return fmt.Errorf("%w: %d links (a hard link to a file elsewhere)", ErrForeign, st.Nlink)
	case st.Size > MaxSharedSize:
		return fmt.Errorf("%w: %d bytes, more than %d", ErrForeign, st.Size, MaxSharedSize)
	}
	return nil
}

// allocate gives the file's first size bytes real pages (it grows the
// file if shorter). A sparse file would be mapped all the same, and the
// first write to a page its filesystem then has no room for (a full
// /dev/shm, which any local user can fill) kills the writer with SIGBUS;
// allocated up front, a full filesystem is an ENOSPC here instead.
// Pages already allocated (QEMU's file, written by the guest) keep their
// contents.
func allocate(f *os.File, size int) error {
	err := unix.Fallocate(int(f.Fd()), 0, 0, int64(size))
	if !errors.Is(err, unix.EOPNOTSUPP) {
		return err
	}
	// A filesystem without fallocate: write the holes out, one page at
	// a time, so that they take real pages. Reading first keeps what a
	// page holds (reading a hole allocates nothing).
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	buf := make([]byte, PageAlign)
	for off := int64(0); off < int64(size); off += PageAlign {
		n := min(int64(PageAlign), int64(size)-off)
		b := buf[:n]
		clear(b)
		if off < fi.Size() {
			if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
				return err
			}
		}
		if _, err := f.WriteAt(b, off); err != nil {
			return err
		}
	}
	return nil
}

// prepare protects the page file (0600, owned by uid:gid) and allocates
// its first size bytes.
func prepare(f *os.File, uid, gid, size int) error {
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("chmod 0600: %w", err)
	}
	if err := f.Chown(uid, gid); err != nil {
		return fmt.Errorf("chown %d:%d: %w", uid, gid, err)
	}
	if err := allocate(f, size); err != nil {
		return fmt.Errorf("allocating %d bytes: %w", size, err)
	}
	return nil
}

// setup protects, allocates, maps and initialises the page file.
func setup(f *os.File, n int, flags uint32, uid, gid, size int) (*Writer, error) {
	if err := prepare(f, uid, gid, size); err != nil {
		return nil, err
	}
	b, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	clear(b[:Size(n)]) // stale slots of an earlier run must not look fresh
	w, err := initWriter(b, n, flags)
	if err != nil {
		unix.Munmap(b)
		return nil, err
	}
	w.f = f
	w.unmap = func() error { return unix.Munmap(b) }
	return w, nil
}

// Path is the page file's path ("" for an in-memory page).
func (w *Writer) Path() string { return w.path }

// Slots is the number of slots.
func (w *Writer) Slots() int { return w.n }

// Publish writes both blocks of slot i (see PublishEstimate and
// PublishLive).
func (w *Writer) Publish(i int, s *Slot) {
	w.PublishLive(i, s)
	w.PublishEstimate(i, s)
}

// PublishEstimate writes the estimate block of slot i under its seqlock,
// then the heartbeat. s.PublishNs should be the current time in the
// page's clock.
func (w *Writer) PublishEstimate(i int, s *Slot) {
	if i < 0 || i >= w.n {
		return
	}
	b := HeaderSize + i*SlotSize
	m := w.m
	m.addU32(b+offSeq, 1) // odd: readers discard what they read from now on
	m.setU32(b+offTID, s.TID)
	m.setU64(b+offSlice, s.SliceNs)
	m.setU64(b+offPublish, s.PublishNs)
	m.setU32(b+offQuota, s.QuotaUS)
	m.setU32(b+offPeriod, s.PeriodUS)
	m.setU32(b+offCont, uint32(s.Contention)|uint32(s.EstFlags)<<8)
	m.setU32(b+offTick, s.TickNs)
	m.setU32(b+offPhase, s.TickPhaseNs)
	m.setU32(b+offMitigation, s.MitigationNs)
	m.setU64(b+offQuotaRun, s.QuotaRunNs)
	m.setU64(b+offQuotaRun+8, 0)
	m.addU32(b+offSeq, 1) // even again: the block is consistent
	m.setU64(offHeartbeat, s.PublishNs)
}

// PublishLive writes the live block of slot i under its seqlock: what the
// BPF programs write at each switch, for a slot they cannot write. It
// must not be used on a slot the BPF programs write (one writer per
// block).
func (w *Writer) PublishLive(i int, s *Slot) {
	if i < 0 || i >= w.n {
		return
	}
	b := HeaderSize + i*SlotSize
	m := w.m
	m.addU32(b+offLiveSeq, 1)
	m.setU32(b+offState, uint32(s.State)|uint32(s.LiveFlags)<<8|uint32(s.CPU)<<16)
	m.setU64(b+offSwitchIn, s.SwitchInNs)
	m.setU64(b+offSwitchOut, s.SwitchOutNs)
	m.setU64(b+offQuotaEnd, s.QuotaEndNs)
	m.addU32(b+offLiveSeq, 1)
}

// LiveSeq returns the live seqlock of slot i, for a writer taking over
// the block (the BPF programs continue from it).
func (w *Writer) LiveSeq(i int) uint32 {
	if i < 0 || i >= w.n {
		return 0
	}
	return w.m.u32(HeaderSize + i*SlotSize + offLiveSeq)
}

// DevIno identifies the page file (to find its mappings in
// /proc/PID/maps); 0, 0 for an in-memory page.
func (w *Writer) DevIno() (dev, ino uint64) {
	if w.f == nil {
		return 0, 0
	}
	var st syscall.Stat_t
	if syscall.Fstat(int(w.f.Fd()), &st) != nil {
		return 0, 0
	}
	return uint64(st.Dev), st.Ino
}

// Close unmaps the page and closes its file; the file stays (a guest or
// reader may still map it). Remove deletes it.
func (w *Writer) Close() error {
	var errs []error
	if w.unmap != nil {
		errs = append(errs, w.unmap())
		w.unmap = nil
	}
	if w.f != nil {
		errs = append(errs, w.f.Close())
		w.f = nil
	}
	return errors.Join(errs...)
}

// Remove closes the writer and deletes its file.
func (w *Writer) Remove() error {
	err := w.Close()
	if w.path != "" {
		if rerr := os.Remove(w.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	return err
}
