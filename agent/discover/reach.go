package discover

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// The agent dials a QMP socket named on a VM's command line as root. So
// that root never connects where the VM's own user could not (another
// VM's monitor, a socket in a directory the user cannot enter), the path
// is resolved as the process sees it, through /proc/PID/root, and every
// directory on the way must be searchable, and the socket writable, by
// the process's file-system uid and groups; after the connection, the
// peer must be the process itself (SO_PEERCRED) before anything is sent.

// maxSymlinks bounds the symbolic links followed in one path, as the
// kernel's own lookup does.
const maxSymlinks = 40

// cred is a process's file-system identity.
type cred struct {
	uid  uint32
	gids []uint32
}

// may reports whether c may do what perm asks (an rwx bit, as 0o4, 0o2
// or 0o1) on a file: owner, group or other bits, as the kernel decides
// without ACLs (a grant only an ACL gives is refused: the safe side).
func (c cred) may(fi fs.FileInfo, perm fs.FileMode) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	if c.uid == 0 {
		return true
	}
	mode := fi.Mode().Perm()
	switch {
	case st.Uid == c.uid:
		return mode&(perm<<6) != 0
	case slices.Contains(c.gids, st.Gid):
		return mode&(perm<<3) != 0
	}
	return mode&perm != 0
}

// resolveAs resolves the absolute path p inside root (a process's
// /proc/PID/root) as a process with cred c would: symbolic links are
// followed inside root, and each directory searched must be searchable by
// c. It returns the resolved path under root, with no link left in it,
// and the last component's FileInfo.
func resolveAs(root, p string, c cred) (string, fs.FileInfo, error) {
	if !filepath.IsAbs(p) {
		return "", nil, fmt.Errorf("%q: not an absolute path", p)
	}
	todo := strings.Split(p, "/")
	cur := "/"
	links := 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		dir, err := os.Stat(root + cur)
		if err != nil {
			return "", nil, err
		}
		if !dir.IsDir() || !c.may(dir, 0o1) {
			return "", nil, fmt.Errorf("%q: uid %d may not search %s", p, c.uid, cur)
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(root + next)
		if err != nil {
			return "", nil, err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if links++; links > maxSymlinks {
				return "", nil, fmt.Errorf("%q: too many symbolic links", p)
			}
			target, err := os.Readlink(root + next)
			if err != nil {
				return "", nil, err
			}
			if filepath.IsAbs(target) {
				cur = "/"
			}
			todo = append(strings.Split(target, "/"), todo...)
			continue
		}
		cur = next
		if len(todo) == 0 {
			return root + cur, fi, nil
		}
	}
	fi, err := os.Stat(root + cur)
	return root + cur, fi, err
}

// socketFor returns the path at which the agent may dial the unix socket
// that process dir (/proc/PID) names as p: resolved as the process sees
// it, a socket its user may write to.
func socketFor(dir, p string) (string, error) {
	id, err := readIDs(dir)
	if err != nil {
		return "", err
	}
	c := id.cred()
	path, fi, err := resolveAs(filepath.Join(dir, "root"), p, c)
	if err != nil {
		return "", err
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return "", fmt.Errorf("%q is not a socket", p)
	}
	if !c.may(fi, 0o2) {
		return "", fmt.Errorf("%q: uid %d may not connect to it", p, c.uid)
	}
	return path, nil
}
