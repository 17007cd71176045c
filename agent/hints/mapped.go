package hints

import (
	"bufio"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// FileID is a file's identity: its device (as stat encodes it) and
// inode. Files are compared by it, never by path: the paths in
// /proc/PID/maps are whatever the process (a tenant) made them.
type FileID struct{ Dev, Ino uint64 }

func fileID(st *unix.Stat_t) FileID { return FileID{Dev: st.Dev, Ino: st.Ino} }

// Bounds on reading one process's maps: at most mapsMaxBytes, and lines
// of any length (only their first fields are parsed). A maps file over
// the bound (a process with tens of thousands of mappings of long paths)
// counts as not read.
const (
	mapsMaxBytes  = 32 << 20
	mapsFieldsMax = 256 // address range, perms, offset, dev, inode fit
)

// Mappers is what a scan of the processes' maps found.
type Mappers struct {
	// By is, per file, the processes (other than this one) that map it.
	By map[FileID][]int
	// Unread counts the processes whose maps could not be read: another
	// user's, or one with capabilities the reader lacks, when the reader
	// has no CAP_SYS_PTRACE (the unit's agent), or over the bound.
	Unread int
}

// scanMaps reads /proc/PID/maps (under proc, normally "/proc") of every
// process but this one and reports which of files each maps, matching
// the dev and inode fields of each line against the files' identities.
func scanMaps(proc string, files []FileID) (Mappers, error) {
	m := Mappers{By: map[FileID][]int{}}
	if len(files) == 0 {
		return m, nil
	}
	want := make(map[FileID]bool, len(files))
	for _, f := range files {
		want[f] = true
	}
	d, err := os.Open(proc)
	if err != nil {
		return m, err
	}
	defer d.Close()
	self := os.Getpid()
	for {
		names, err := d.Readdirnames(512)
		for _, name := range names {
			pid, perr := strconv.Atoi(name)
			if perr != nil || pid <= 0 || pid == self {
				continue
			}
			found, rerr := mapsOf(filepath.Join(proc, name, "maps"), want)
			switch {
			case rerr == nil:
				for _, f := range found {
					m.By[f] = append(m.By[f], pid)
				}
			case errors.Is(rerr, fs.ErrNotExist), errors.Is(rerr, unix.ESRCH):
				// The process exited: it maps nothing.
			default:
				m.Unread++
			}
		}
		if err == io.EOF || len(names) == 0 {
			return m, nil
		}
		if err != nil {
			return m, err
		}
	}
}

// mapsOf returns the files of want that the maps file at path names.
func mapsOf(path string, want map[FileID]bool) ([]FileID, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMaps(f, want)
}

// errTooLong: a maps file over mapsMaxBytes.
var errTooLong = errors.New("maps over the bound")

// parseMaps reads maps lines from r ("start-end perms offset MAJ:MIN
// inode path", dev in hex, inode in decimal) and returns the files of
// want among them, each once. The path is never looked at.
func parseMaps(r io.Reader, want map[FileID]bool) ([]FileID, error) {
	br := bufio.NewReaderSize(r, mapsFieldsMax)
	var out []FileID
	seen := map[FileID]bool{}
	total := 0
	for {
		line, err := br.ReadSlice('\n')
		total += len(line)
		// Parsed before reading on: the next read reuses the buffer.
		if id, ok := mapsLineID(line); ok && want[id] && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
		// The rest of a long line (its path) is skipped unread.
		for errors.Is(err, bufio.ErrBufferFull) && total <= mapsMaxBytes {
			line, err = br.ReadSlice('\n')
			total += len(line)
		}
		switch {
		case total > mapsMaxBytes:
			return nil, errTooLong
		case err == io.EOF:
			return out, nil
		case err != nil:
			return nil, err
		}
	}
}

// mapsLineID parses the dev and inode fields of a maps line (the fourth
// and fifth); ok is false for an anonymous mapping (inode 0) or a line
// that does not parse.
func mapsLineID(line []byte) (FileID, bool) {
	var fields [5][]byte
	n := 0
	for i := 0; i < len(line) && n < 5; {
		for i < len(line) && line[i] == ' ' {
			i++
		}
		j := i
		for j < len(line) && line[j] != ' ' && line[j] != '\n' {
			j++
		}
		if j == i {
			break
		}
		fields[n] = line[i:j]
		n++
		i = j
	}
	if n < 5 {
		return FileID{}, false
	}
	dev := fields[3]
	colon := -1
	for i, c := range dev {
		if c == ':' {
			colon = i
			break
		}
	}
	if colon < 0 {
		return FileID{}, false
	}
	major, err1 := strconv.ParseUint(string(dev[:colon]), 16, 32)
	minor, err2 := strconv.ParseUint(string(dev[colon+1:]), 16, 32)
	ino, err3 := strconv.ParseUint(string(fields[4]), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || ino == 0 {
		return FileID{}, false
	}
	return FileID{Dev: unix.Mkdev(uint32(major), uint32(minor)), Ino: ino}, true
}

// pageFile is a page file the agent made (or found at start) and may
// remove when no other process uses it.
type pageFile struct {
	path string
	id   FileID
}

// users tells, for each file, why it must stay ("" when nothing else
// uses it): a live process other than this one holds it open for
// writing, as a QEMU does for as long as it maps its memory-backend-file
// (share=on maps it read-write), or maps it (its maps name the file's
// dev and inode). The first is asked of the kernel with a read lease,
// which it refuses while anyone has the file open for writing: one
// system call per file, which settles a VM's page; only the files it
// does not settle cost a read of every process's maps (bounded per
// process by mapsMaxBytes), which also finds a reader that mapped a page
// and closed it. A process whose maps cannot be read (another user's,
// when the agent has no CAP_SYS_PTRACE, as under the unit) is covered by
// the lease. The caller must hold no descriptor or mapping of the files
// open for writing itself.
func users(proc string, files []pageFile) []string {
	why := make([]string, len(files))
	leaseErr := make([]error, len(files))
	var ids []FileID
	for i, f := range files {
		w, err := openForWriting(f)
		if w {
			why[i] = "open for writing by another process"
			continue
		}
		leaseErr[i] = err
		ids = append(ids, f.id)
	}
	if len(ids) == 0 {
		return why
	}
	m, err := scanMaps(proc, ids)
	for i, f := range files {
		if why[i] != "" {
			continue
		}
		if pids := m.By[f.id]; len(pids) > 0 {
			why[i] = "mapped by process " + strconv.Itoa(pids[0])
		} else if leaseErr[i] != nil && (err != nil || m.Unread > 0) {
			// Neither the maps nor the lease could rule a user out.
			why[i] = "cannot tell whether a process maps it: " + leaseErr[i].Error()
		}
	}
	return why
}

// openForWriting tells whether any process has the file open for
// writing (or mapped through such a descriptor), by asking for a read
// lease, which is the file owner's to take: a page owned by QEMU's user
// is made root's for the question (on the descriptor) and given back.
// Nothing waits on the lease: it is let go at once.
func openForWriting(f pageFile) (bool, error) {
	fd, err := unix.Open(f.path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return false, nil // gone already
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, err
	}
	if fileID(&st) != f.id {
		return false, nil // not the file any more: removeSame leaves it
	}
	err = readLease(fd)
	if errors.Is(err, unix.EACCES) && os.Geteuid() == 0 && st.Uid != 0 {
		if err = unix.Fchown(fd, 0, -1); err == nil {
			err = readLease(fd)
			if rerr := unix.Fchown(fd, int(st.Uid), -1); rerr != nil && err == nil {
				err = rerr
			}
		}
	}
	if errors.Is(err, unix.EAGAIN) {
		return true, nil
	}
	return false, err
}

// readLease takes a read lease on fd and lets it go.
func readLease(fd int) error {
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_RDLCK); err != nil {
		return err
	}
	_, err := unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_UNLCK)
	return err
}

// removeSame removes path if it still names the file id (not another
// file put there since it was looked at).
func removeSame(path string, id FileID) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || fileID(&st) != id {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
