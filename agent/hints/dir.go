package hints

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/hintpage"
)

// DefaultDir is where pages go: the agent's own directory
// (hintpage.DefaultDir), which OwnDir makes.
const DefaultDir = hintpage.DefaultDir

// DirMode is the mode OwnDir gives the directory it makes: root alone
// lists, creates, renames and removes entries; every user may reach a
// page by its name (QEMU's user, a local target's reader), which the
// page's own mode (0600, its reader's) then decides.
const DirMode = 0o711

// OwnDir makes dir fit to hold pages, or says in one line why it is not:
// the default directory is made (mode DirMode, its parents 0755) when
// missing and its mode put back to DirMode; any directory must be a real
// directory (not a symlink), owned by this process's user, writable by
// no one else, and every directory above it owned by root and writable
// by no one else unless sticky (where no other user can rename or
// remove what root made). Then no other user can put a file, a FIFO or
// a symlink where a page will be, nor swap the directory: every entry in
// it was made by root (the agent, `agent hints-args`).
func OwnDir(dir string) error {
	return ownDir(dir, filepath.Clean(dir) == DefaultDir)
}

// ownDir is OwnDir; own: dir is the agent's own, to make and repair.
func ownDir(dir string, own bool) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("hints directory %q: want an absolute path", dir)
	}
	dir = filepath.Clean(dir)
	if own {
		if err := makeDir(dir); err != nil {
			return err
		}
	}
	if err := checkOwnDir(dir, own); err != nil {
		return err
	}
	return checkParents(dir)
}

// makeDir makes dir (mode DirMode) and its parents where missing, and
// lets every user search its parent (the agent's state directory, whose
// files keep their own modes): QEMU's user opens its page through both.
// The modes are set, not left to the umask (the unit's is 0077).
func makeDir(dir string) error {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("hints directory: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(parent, &st); err != nil {
		return fmt.Errorf("hints directory: %w", &fs.PathError{Op: "stat", Path: parent, Err: err})
	}
	if st.Mode&0o011 != 0o011 {
		if err := unix.Chmod(parent, st.Mode&0o7777|0o011); err != nil {
			return fmt.Errorf("hints directory: %w", &fs.PathError{Op: "chmod", Path: parent, Err: err})
		}
	}
	err := unix.Mkdir(dir, DirMode)
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("hints directory %s: %w", dir, err)
	}
	return nil
}

// checkOwnDir checks dir itself; repair puts its mode back to DirMode
// (the directory the agent made) rather than refusing it.
func checkOwnDir(dir string, repair bool) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("hints directory: %w", &fs.PathError{Op: "lstat", Path: dir, Err: err})
	}
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return fmt.Errorf("hints directory %s is a symlink: refused (name the directory itself)", dir)
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("hints directory %s: not a directory", dir)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("hints directory %s is owned by uid %d, not by the agent's (%d): refused (its owner could replace the pages)", dir, st.Uid, os.Geteuid())
	case repair && st.Mode&0o7777 != DirMode:
		// The agent's own: its mode is DirMode, whatever made it.
	case st.Mode&0o022 == 0:
		return nil
	case !repair:
		return fmt.Errorf("hints directory %s is writable by others (mode %#o): refused (another user could put a file where a page will be); use one only root can write, such as %s", dir, st.Mode&0o7777, DefaultDir)
	}
	if err := unix.Chmod(dir, DirMode); err != nil {
		return fmt.Errorf("hints directory %s: %w", dir, err)
	}
	return nil
}

// checkParents checks every directory above dir (as resolved: /var/run
// is /run): owned by root, and writable by no one else unless sticky.
func checkParents(dir string) error {
	parent, err := filepath.EvalSymlinks(filepath.Dir(dir))
	if err != nil {
		return fmt.Errorf("hints directory %s: %w", dir, err)
	}
	for p := parent; ; p = filepath.Dir(p) {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return fmt.Errorf("hints directory %s: %w", dir, &fs.PathError{Op: "stat", Path: p, Err: err})
		}
		if st.Uid != 0 || st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
			return fmt.Errorf("hints directory %s: %s above it is owned by uid %d, mode %#o: refused (another user could swap the directory)", dir, p, st.Uid, st.Mode&0o7777)
		}
		if p == "/" {
			return nil
		}
	}
}

// CheckDir tells whether pages can be created in dir (OwnDir, then a
// file made and removed): one clear error for a missing, foreign or
// read-only directory, at start rather than per target.
func CheckDir(dir string) error {
	if err := OwnDir(dir); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".vgpu-probe-hints-check-*")
	if err != nil {
		return fmt.Errorf("hints directory %s is not writable: %w", dir, err)
	}
	f.Close()
	return os.Remove(f.Name())
}

// PreparePage makes the page of VM target in dir (OwnDir's, made if it is
// the default) before QEMU starts (hintpage.PrepareShared), owned by
// uid:gid, QEMU's user, and returns its path.
func PreparePage(dir, target string, uid, gid int) (string, error) {
	if err := OwnDir(dir); err != nil {
		return "", err
	}
	path := filepath.Join(filepath.Clean(dir), hintpage.FileName(target))
	return path, hintpage.PrepareShared(path, uid, gid, hintpage.ShmemSizeMiB<<20)
}
