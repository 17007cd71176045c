package hints

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/vgpu-probe/vgpu-probe/hintpage"
)

// RemoveStale removes what an agent that died left in dir: page files,
// their sockets, and half-made temporary pages. The caller must own the
// directory (its lock): everything named as a page there is then an
// earlier owner's. Directories are left alone (an experiment's own
// page directory may sit in /dev/shm under the same prefix).
func RemoveStale(dir string) ([]string, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range es {
		name := e.Name()
		if !strings.HasPrefix(strings.TrimPrefix(name, "."), hintpage.FilePrefix) {
			continue
		}
		if t := e.Type(); t != 0 && t != fs.ModeSocket {
			continue // not a regular file or a socket
		}
		p := filepath.Join(dir, name)
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, name)
	}
	return removed, errors.Join(errs...)
}
