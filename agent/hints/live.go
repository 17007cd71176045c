package hints

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/bpfload"
	"github.com/vgpu-probe/vgpu-probe/agent/procstat"
	"github.com/vgpu-probe/vgpu-probe/hintpage"
)

// LiveArrays is the BPF programs' side of local targets' live blocks
// (*bpfload.Probe): one memory-mappable array per target, into which the
// programs write the live block of each registered thread at each of its
// switches (docs/hints.md "Live blocks in a BPF map").
type LiveArrays interface {
	NewHintArray(slots int) (*bpfload.HintArray, error)
	RemoveHintArray(a *bpfload.HintArray) error
	SetHintSlot(tid, id, slot uint32) error
	ClearHintSlot(tid uint32) error
}

// handOver: after unregistering a thread, the publisher waits this long
// before writing its page's live block again, so that a BPF program still
// inside a write of the array (a few µs) is done with the thread.
const handOver = 2 * time.Millisecond

// liveSock is a thread page's live array and the socket its target's
// processes get it from.
type liveSock struct {
	arr    *bpfload.HintArray
	ln     *net.UnixListener
	path   string
	peers  map[int]int // tgid -> open connections
	conns  map[*net.UnixConn]struct{}
	closed bool
}

// startLive gives a thread page its live array and socket, once the
// programs can write arrays. Must be called with mu held.
func (p *Publisher) startLive(pg *page) {
	a := p.arrays.Load()
	if pg.vcpu || pg.live != nil || a == nil {
		return
	}
	log := p.opts.Log.With().Str("target", pg.key).Logger()
	arr, err := a.NewHintArray(pg.w.Slots())
	if err != nil {
		log.Info().Err(err).Msg("hint pages: no live array; the agent writes the live blocks into the page")
		return
	}
	path := pg.w.Path() + hintpage.SockSuffix
	// A leftover of an earlier agent (the directory is the agent's).
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Info().Err(err).Msg("hint pages: removing an old socket")
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err == nil {
		ln.SetUnlinkOnClose(true)
		// Owned by the target's user, 0600, like the page; peers are
		// checked by their credentials all the same.
		if err = protectSocket(path, pg.uid, pg.gid); err != nil {
			ln.Close()
		}
	}
	if err != nil {
		_ = a.RemoveHintArray(arr)
		log.Info().Err(err).Msg("hint pages: no socket for the live array; the agent writes the live blocks into the page")
		return
	}
	ls := &liveSock{arr: arr, ln: ln, path: path, peers: map[int]int{}, conns: map[*net.UnixConn]struct{}{}}
	pg.live = ls
	log.Debug().Str("socket", path).Uint32("array", arr.ID).Msg("hint pages: live array ready")
	go p.serve(pg, ls)
}

// stopLive closes the socket and removes the array. Must be called with
// mu held, after the page's threads were forgotten.
func (p *Publisher) stopLive(pg *page) {
	ls := pg.live
	if ls == nil {
		return
	}
	pg.live = nil
	ls.closed = true
	ls.ln.Close()
	for c := range ls.conns {
		c.Close()
	}
	if a := p.arrays.Load(); a != nil {
		if err := a.RemoveHintArray(ls.arr); err != nil {
			p.opts.Log.Debug().Err(err).Str("target", pg.key).Msg("hint pages: removing a live array")
		}
	}
}

func (p *Publisher) serve(pg *page, ls *liveSock) {
	for {
		c, err := ls.ln.AcceptUnix()
		if err != nil {
			p.mu.Lock()
			closed := ls.closed
			p.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // never spin
			continue
		}
		go p.handle(pg, ls, c)
	}
}

// handle checks a peer and, if it is one of the target's processes, sends
// it the array and hands its threads' live blocks to the programs until
// it closes the connection.
func (p *Publisher) handle(pg *page, ls *liveSock, c *net.UnixConn) {
	defer c.Close()
	var cred *unix.Ucred
	if raw, err := c.SyscallConn(); err == nil {
		_ = raw.Control(func(fd uintptr) {
			cred, _ = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		})
	}
	p.mu.Lock()
	if ls.closed || cred == nil || !p.admits(pg, cred) {
		p.refused++
		p.mu.Unlock()
		if cred != nil {
			p.opts.Log.Debug().Str("target", pg.key).Int32("pid", cred.Pid).Uint32("uid", cred.Uid).
				Msg("hint pages: refused a live array to a process outside the target")
		}
		return
	}
	fd, err := ls.arr.FD()
	if err == nil {
		_, ino := pg.w.DevIno()
		msg := hintpage.LiveMsg{Slots: uint32(ls.arr.Slots), PageIno: ino}
		_, _, err = c.WriteMsgUnix(msg.Encode(), unix.UnixRights(fd), nil)
		unix.Close(fd)
	}
	if err != nil {
		p.mu.Unlock()
		return
	}
	pid := int(cred.Pid)
	ls.conns[c] = struct{}{}
	ls.peers[pid]++
	p.served++
	for _, tt := range pg.threads {
		if p.tgid(tt) == pid {
			p.mapThread(ls, tt)
		}
	}
	p.mu.Unlock()

	var b [64]byte
	for {
		if _, err := c.Read(b[:]); err != nil {
			break
		}
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	delete(ls.conns, c)
	if ls.peers[pid]--; ls.peers[pid] > 0 || ls.closed {
		return
	}
	delete(ls.peers, pid)
	for _, tt := range pg.threads {
		if tt.tgid == pid {
			p.unmap(tt)
		}
	}
}

// admits: the peer runs as the page's owner (or root) and is a process
// whose threads the page holds. Must be called with mu held.
func (p *Publisher) admits(pg *page, cred *unix.Ucred) bool {
	if int(cred.Uid) != pg.uid && cred.Uid != 0 {
		return false
	}
	for _, tt := range pg.threads {
		if p.tgid(tt) == int(cred.Pid) {
			return true
		}
	}
	return false
}

// tgid returns (and keeps) the process of a thread; 0 when it is gone.
func (p *Publisher) tgid(tt *thread) int {
	if tt.tgid == 0 {
		tt.tgid, _ = tgidOf(tt.tid)
	}
	return tt.tgid
}

// mapIfServed hands a new thread's live block to the programs if its
// process holds the array. Must be called with mu held.
func (p *Publisher) mapIfServed(pg *page, tt *thread) {
	if ls := pg.live; ls != nil && len(ls.peers) > 0 && ls.peers[p.tgid(tt)] > 0 {
		p.mapThread(ls, tt)
	}
}

func (p *Publisher) mapThread(ls *liveSock, tt *thread) {
	a := p.arrays.Load()
	if tt.mapped || a == nil {
		return
	}
	if err := a.SetHintSlot(uint32(tt.tid), ls.arr.ID, uint32(tt.slot)); err != nil {
		p.opts.Log.Debug().Err(err).Int("tid", tt.tid).Msg("hint pages: registering a live block")
		return
	}
	tt.mapped = true
	p.mappedNow++
}

// unmap gives a thread's live block back to the agent's user space.
func (p *Publisher) unmap(tt *thread) {
	if !tt.mapped {
		return
	}
	if a := p.arrays.Load(); a != nil {
		_ = a.ClearHintSlot(uint32(tt.tid)) // the thread may be gone, and its entry with it
	}
	tt.mapped = false
	tt.userAfter = monoNow() + uint64(handOver)
	p.mappedNow--
	p.kickRefresh()
}

// LiveStats returns how many threads have their live block in a live
// array now, how many connections got an array, and how many were refused.
func (p *Publisher) LiveStats() (mapped, served, refused int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mappedNow, p.served, p.refused
}

func tgidOf(tid int) (int, error) {
	st, err := procstat.Status(tid)
	return st.TGID, err
}

// protectSocket makes the socket just bound at path mode 0600 and owned
// by uid:gid, acting on the inode opened without following a symlink
// (O_PATH): a path in a directory writable by others is not followed
// into a file somebody put there. A bound socket has no descriptor of
// its inode to fchmod, so the mode goes through /proc/self/fd.
func protectSocket(path string, uid, gid int) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK || int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s: not the socket just made", path)
	}
	if err := unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), 0o600); err != nil {
		return err
	}
	return unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH)
}
