package discover

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// The agent dials a QMP socket named on a VM's command line as root. So
// that root never connects where the VM's own user could not (another
// VM's monitor, a socket in a directory the user cannot enter), the path
// is resolved as the process sees it, through /proc/PID/root, and every
// directory on the way must be searchable, and the socket writable, by
// the process's file-system uid and groups; after the connection, the
// peer must be the process itself (SO_PEERCRED) before anything is sent.
//
// The path is walked one component at a time, each opened O_PATH and
// O_NOFOLLOW relative to the descriptor of the directory checked before
// it, and the connection is made through the descriptor of the socket
// checked last (/proc/self/fd/N). A user who may rename the path's
// directories (the VM's own, or a trusted user) cannot swap one for a
// symbolic link between the check and the connect: a link is read
// through its own descriptor and its target walked and checked the same
// way, and nothing is looked up by name a second time.

// maxSymlinks bounds the symbolic links followed in one path, as the
// kernel's own lookup does.
const maxSymlinks = 40

// cred is a process's file-system identity.
type cred struct {
	uid  uint32
	gids []uint32
}

// may reports whether c may do what perm asks (an rwx bit, as 0o4, 0o2
// or 0o1) on the file st describes: owner, group or other bits, as the
// kernel decides without ACLs (a grant only an ACL gives is refused: the
// safe side).
func (c cred) may(st *unix.Stat_t, perm uint32) bool {
	if c.uid == 0 {
		return true
	}
	mode := st.Mode & 0o777
	switch {
	case st.Uid == c.uid:
		return mode&(perm<<6) != 0
	case slices.Contains(c.gids, st.Gid):
		return mode&(perm<<3) != 0
	}
	return mode&perm != 0
}

// walk is the state of one resolution: the descriptors of the
// directories from the root down to the current one (".." pops one, and
// never above the root), and the symbolic links followed so far.
type walk struct {
	path  string // as given, for errors
	c     cred
	dirs  []int
	links int
}

func (w *walk) closeAll() {
	for _, fd := range w.dirs {
		unix.Close(fd)
	}
	w.dirs = nil
}

// toRoot drops every directory but the root (an absolute link target).
func (w *walk) toRoot() {
	for _, fd := range w.dirs[1:] {
		unix.Close(fd)
	}
	w.dirs = w.dirs[:1]
}

// resolveAs resolves the absolute path p inside root (a process's
// /proc/PID/root) as a process with cred c would: symbolic links are
// followed inside root, and each directory searched must be searchable
// by c. It returns an O_PATH descriptor of the file p names, with its
// status; the caller closes it. Nothing on the way is looked up by name
// twice (see above).
func resolveAs(root, p string, c cred) (*os.File, *unix.Stat_t, error) {
	if !filepath.IsAbs(p) {
		return nil, nil, fmt.Errorf("%q: not an absolute path", p)
	}
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%q: %w", p, err)
	}
	w := &walk{path: p, c: c, dirs: []int{rfd}}
	defer w.closeAll()
	todo := strings.Split(p, "/")
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			if n := len(w.dirs); n > 1 {
				unix.Close(w.dirs[n-1])
				w.dirs = w.dirs[:n-1]
			}
			continue
		}
		target, err := w.step(name)
		if err != nil {
			return nil, nil, err
		}
		if target != "" {
			todo = append(strings.Split(target, "/"), todo...)
		}
	}
	return w.last()
}

// step looks name up in the current directory, once c may search it. A
// directory or other file becomes the current one; a symbolic link is
// read through its own descriptor and its target returned to walk next
// (from the root when absolute).
func (w *walk) step(name string) (string, error) {
	dir := w.dirs[len(w.dirs)-1]
	var st unix.Stat_t
	if err := unix.Fstat(dir, &st); err != nil {
		return "", fmt.Errorf("%q: %w", w.path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || !w.c.may(&st, 0o1) {
		return "", fmt.Errorf("%q: uid %d may not search the directory holding %s", w.path, w.c.uid, name)
	}
	fd, err := unix.Openat(dir, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("%q: %s: %w", w.path, name, err)
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return "", fmt.Errorf("%q: %w", w.path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		w.dirs = append(w.dirs, fd)
		return "", nil
	}
	defer unix.Close(fd)
	if w.links++; w.links > maxSymlinks {
		return "", fmt.Errorf("%q: too many symbolic links", w.path)
	}
	target, err := readlinkFD(fd)
	if err != nil {
		return "", fmt.Errorf("%q: %w", w.path, err)
	}
	if filepath.IsAbs(target) {
		w.toRoot()
	}
	return target, nil
}

// last hands over the current file's descriptor with its status; the
// root itself is no file a path names here.
func (w *walk) last() (*os.File, *unix.Stat_t, error) {
	n := len(w.dirs)
	if n == 1 {
		return nil, nil, fmt.Errorf("%q: names the root", w.path)
	}
	fd := w.dirs[n-1]
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, nil, fmt.Errorf("%q: %w", w.path, err)
	}
	w.dirs = w.dirs[:n-1]
	return os.NewFile(uintptr(fd), w.path), &st, nil
}

// readlinkFD reads the target of the symbolic link fd (an O_PATH
// descriptor of the link itself).
func readlinkFD(fd int) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", err
	}
	if n >= len(buf) {
		return "", errors.New("symbolic link target too long")
	}
	return string(buf[:n]), nil
}

// socketFor opens the unix socket that process dir (/proc/PID) names as
// p, resolved as the process sees it, once its user may write to it: an
// O_PATH descriptor to connect through (dialFD), which the caller
// closes.
func socketFor(dir, p string) (*os.File, error) {
	id, err := readIDs(dir)
	if err != nil {
		return nil, err
	}
	c := id.cred()
	f, st, err := resolveAs(filepath.Join(dir, "root"), p, c)
	if err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		f.Close()
		return nil, fmt.Errorf("%q is not a socket", p)
	}
	if !c.may(st, 0o2) {
		f.Close()
		return nil, fmt.Errorf("%q: uid %d may not connect to it", p, c.uid)
	}
	return f, nil
}
