package hscore

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// WriteStats writes doc, a stats document, to the file that pattern
// (HYBRIDSYNC_STATS) names, "%p" replaced by this process's pid: whole or
// not at all, through a temporary file and a rename, so that a reader never
// sees half of it. The one writer of that file, for the library at exit or
// shutdown, for a library that could not start, and for the benchmark's
// device.
func WriteStats(pattern string, doc []byte) error {
	pid := strconv.Itoa(os.Getpid())
	path := strings.ReplaceAll(pattern, "%p", pid)
	tmp := fmt.Sprintf("%s.tmp.%s", path, pid)
	if err := os.WriteFile(tmp, append(doc, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
