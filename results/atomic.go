package results

import (
	"path/filepath"

	"github.com/google/renameio/v2"
)

// WriteAtomic writes data to path whole or not at all: into a temporary
// file in path's directory, synced to disk, then renamed over path. A
// reader or a crash never sees half a file, a failed write leaves the old
// file as it was and removes the temporary one, and after a crash the new
// name never points at an empty file (the sync comes before the rename).
//
// The file is made mode 0644 less the umask, whatever mode an old file at
// path had: results written under sudo stay readable by the user. It is
// the writer of every results, NVML and report output file.
func WriteAtomic(path string, data []byte) error {
	f, err := renameio.NewPendingFile(path,
		renameio.WithTempDir(filepath.Dir(path)), // not $TMPDIR: the rename must stay on path's file system
		renameio.WithPermissions(0o644))
	if err != nil {
		return err
	}
	defer f.Cleanup() // after a successful rename this does nothing
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.CloseAtomicallyReplace()
}
