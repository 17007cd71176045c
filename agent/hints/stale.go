package hints

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/hintpage"
)

// Stale is what RemoveStale did: the names it removed, and those it kept
// with why.
type Stale struct {
	Removed []string
	Kept    map[string]string
}

// RemoveStale removes what an agent that died (or stopped) left in dir:
// page files, their sockets, and half-made temporary pages. The caller
// must own the directory (its lock, OwnDir): it removes nothing from a
// directory another user owns or may write, where a file named as a
// page may be anyone's. Only what vgpu-probe made goes: a page file of
// mode 0600 (what the agent and hints-args make; a file QEMU made itself
// is 0644 and stays), which no other live process uses (see users): a
// running QEMU maps the page the earlier agent published, and the next
// page for that VM is written into it in place (hintpage.OpenShared).
// Directories, symlinks and other non-regular files are left alone.
func RemoveStale(dir string) (Stale, error) {
	return removeStale("/proc", dir)
}

func removeStale(proc, dir string) (Stale, error) {
	out := Stale{Kept: map[string]string{}}
	if err := checkOwnDir(dir, false); err != nil {
		return out, err
	}
	es, err := os.ReadDir(dir)
	if err != nil {
		return out, err
	}
	var errs []error
	var files []pageFile
	var names []string
	for _, e := range es {
		name := e.Name()
		if !strings.HasPrefix(strings.TrimPrefix(name, "."), hintpage.FilePrefix) {
			continue
		}
		p := filepath.Join(dir, name)
		switch e.Type() {
		case fs.ModeSocket:
			// A dead agent's: nobody listens on it any more.
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
				continue
			}
			out.Removed = append(out.Removed, name)
		case 0: // a regular file
			var st unix.Stat_t
			if err := unix.Lstat(p, &st); err != nil {
				if !errors.Is(err, unix.ENOENT) {
					errs = append(errs, err)
				}
				continue
			}
			if st.Mode&unix.S_IFMT != unix.S_IFREG {
				continue
			}
			if st.Mode&0o077 != 0 {
				out.Kept[name] = "not made by vgpu-probe (mode " + strconv.FormatUint(uint64(st.Mode&0o7777), 8) + ")"
				continue
			}
			files = append(files, pageFile{path: p, id: fileID(&st)})
			names = append(names, name)
		}
	}
	for i, why := range users(proc, files) {
		if why != "" {
			out.Kept[names[i]] = why
			continue
		}
		if err := removeSame(files[i].path, files[i].id); err != nil {
			errs = append(errs, err)
			continue
		}
		out.Removed = append(out.Removed, names[i])
	}
	return out, errors.Join(errs...)
}
