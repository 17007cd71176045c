package hintpage

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"syscall"

	"golang.org/x/sys/unix"
)

// File is a page file mapped read-only: a local target's page, the guest's
// mirror of the ivshmem BAR, or the BAR's resource2 file itself.
type File struct {
	*Page
	path     string
	b        []byte
	dev, ino uint64
	uid      uint32
}

// Map maps the page at path read-only and parses its header. The path is
// opened without blocking and must name a regular file (a /dev/shm page,
// the BAR's sysfs resource2): a FIFO there would otherwise hang the
// program opening it, and a device is no page (ErrNotRegular).
func Map(path string) (*File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening hint page: %w", err)
	}
	defer f.Close() // the mapping outlives the descriptor
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("hint page %s: %w", path, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, fmt.Errorf("%w: %s", ErrNotRegular, path)
	}
	if st.Size < HeaderSize || st.Size > 64<<20 {
		return nil, fmt.Errorf("%w: %s is %d bytes", ErrSize, path, st.Size)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping hint page %s: %w", path, err)
	}
	var p *Page
	err = guard(func() error {
		var perr error
		p, perr = Parse(b)
		return perr
	})
	if err != nil {
		unix.Munmap(b)
		return nil, fmt.Errorf("hint page %s: %w", path, err)
	}
	return &File{Page: p, path: path, b: b, dev: uint64(st.Dev), ino: st.Ino, uid: st.Uid}, nil
}

// Replaced tells whether path now names another file than the one mapped
// (the publisher re-created the page, or it was removed).
func (f *File) Replaced() bool {
	var st syscall.Stat_t
	if err := syscall.Stat(f.path, &st); err != nil {
		return true
	}
	return uint64(st.Dev) != f.dev || st.Ino != f.ino
}

// Path returns the path the page was mapped from.
func (f *File) Path() string { return f.path }

// Ino and UID are the mapped file's inode and owner.
func (f *File) Ino() uint64 { return f.ino }

// UID is the mapped file's owner.
func (f *File) UID() uint32 { return f.uid }

// ReadSlot is Page.ReadSlot, safe against the file shrinking under the
// mapping (a truncated file faults instead of reading zeros).
func (f *File) ReadSlot(i int, out *Slot) error {
	return guard(func() error { return f.Page.ReadSlot(i, out) })
}

// FindTID is Page.FindTID, safe against the file shrinking.
func (f *File) FindTID(tid int, out *Slot) error {
	return guard(func() error { return f.Page.FindTID(tid, out) })
}

// Close unmaps the page.
func (f *File) Close() error { return unix.Munmap(f.b) }

// ErrNotRegular: the path names a FIFO, a device, a directory or a socket,
// not a page file.
var ErrNotRegular = errors.New("hint page: not a regular file")

// ErrFault: the mapped file was truncated while being read.
var ErrFault = errors.New("hint page: mapping faulted (file truncated)")

// guard turns a fault on the mapping into ErrFault: the reader runs inside
// applications, where a page another process can shrink must not crash
// them.
func guard(fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			err = ErrFault
		}
	}()
	return fn()
}
