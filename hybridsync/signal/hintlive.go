package signal

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/hintpage"
)

// liveArray is the live-block array of a local target, mapped read-only
// (docs/hints.md "Live blocks in a BPF map"): the BPF programs write each
// thread's live block there at its switches. sock stays open while it is
// used: the agent writes this process's live blocks into the array only
// (not into the page) while the connection is open.
type liveArray struct {
	file *hintpage.File // the page it belongs to
	arr  *hintpage.LiveArray
	sock int
}

// liveTimeout bounds the wait for the agent's answer (reopen runs on an
// application thread, at most once per reopenEvery).
const liveTimeout = 100 // ms

// connectLive asks the agent, over the socket next to the page f, for the
// page's live array. Any failure returns an error and leaves nothing open:
// the reader then uses the page's own live blocks.
func connectLive(f *hintpage.File) (*liveArray, error) {
	if runtime.GOARCH != "amd64" {
		return nil, errors.New("live arrays are x86-64 only")
	}
	if f.Header().Flags&hintpage.FlagVCPU != 0 {
		return nil, errors.New("vCPU page: no live array")
	}
	path := f.Path() + hintpage.SockSuffix
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return nil, err
	}
	// The agent makes it the page owner's; anyone else's is not the agent's.
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK || (st.Uid != f.UID() && st.Uid != 0) {
		return nil, fmt.Errorf("%s: not a socket of the page's owner", path)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			unix.Close(fd)
		}
	}()
	tv := unix.Timeval{Usec: liveTimeout * 1000}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return nil, err
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		return nil, err
	}
	buf := make([]byte, hintpage.LiveMsgSize+1)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, err
	}
	var mapFD = -1
	if cms, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, cm := range cms {
			fds, err := unix.ParseUnixRights(&cm)
			if err != nil {
				continue
			}
			for _, x := range fds {
				if mapFD < 0 {
					mapFD = x
				} else {
					unix.Close(x) // one only
				}
			}
		}
	}
	if mapFD < 0 {
		return nil, errors.New("the agent sent no live array")
	}
	defer unix.Close(mapFD) // the mapping keeps the array
	// Only a BPF map: not a file someone else put on the socket.
	if l, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(mapFD)); err != nil || l != "anon_inode:bpf-map" {
		return nil, fmt.Errorf("the live array descriptor is not a BPF map (%q)", l)
	}
	m, err := hintpage.DecodeLiveMsg(buf[:n])
	if err != nil {
		return nil, err
	}
	if m.PageIno != f.Ino() || int(m.Slots) != f.Slots() {
		return nil, fmt.Errorf("live array of %d slots for inode %d, page has %d, inode %d", m.Slots, m.PageIno, f.Slots(), f.Ino())
	}
	mem, err := unix.Mmap(mapFD, 0, hintpage.ArraySize(int(m.Slots)), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping the live array: %w", err)
	}
	arr, err := hintpage.ParseLiveArray(mem, int(m.Slots))
	if err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	ok = true
	return &liveArray{file: f, arr: arr, sock: fd}, nil
}

// readLive overwrites s's live fields from the array, for slot i of
// thread tid, when it has a whole block of that thread; otherwise s keeps
// the page's.
func (l *liveArray) readLive(i int, tid uint32, s *hintpage.Slot) bool {
	for try := 0; try < 4; try++ {
		err := l.arr.ReadLive(i, tid, s)
		if err == nil {
			return true
		}
		if !errors.Is(err, hintpage.ErrTorn) {
			return false
		}
	}
	return false
}

// ReadSlot reads the calling thread's slot (thread tid) as Remaining
// would, for diagnostics and tests: ok when it may be used, live when its
// live block came from the agent's live array rather than the page.
func (h *HintSource) ReadSlot(tid int, now int64, s *hintpage.Slot) (live, ok bool) {
	_, ok = h.slot(tid, now, s)
	l := h.live.Load()
	return ok && l != nil && l.file == h.file.Load() && s.LiveFlags&hintpage.LiveKernel != 0, ok
}

// LiveArray tells whether the agent gave this source its page's live array.
func (h *HintSource) LiveArray() bool {
	l := h.live.Load()
	return l != nil && l.file == h.file.Load()
}
