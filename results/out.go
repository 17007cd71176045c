package results

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Root is where run, bench, apps and advise write when --out is not
// given: vgpu-probe-results/ under the working directory, a name of its
// own, so that in the source tree it is none of the project's package
// folders (git ignores it: .gitignore), and in a user's folder it says
// what wrote it.
const Root = "vgpu-probe-results"

// KindAdvise names advise's default directories; the results document it
// writes is of KindApps.
const KindAdvise = "advise"

// DefaultDir is the output directory of a command of kind (KindRun,
// KindBench, KindApps, KindAdvise) started at now, when --out is not
// given: Root/KIND-YYYYMMDD-HHMMSS, the time in UTC, so that directories
// sort by when they were made whatever the machine's zone.
func DefaultDir(kind string, now time.Time) string {
	return filepath.Join(Root, kind+"-"+Stamp(now))
}

// Stamp is now as the names of results directories and their side files
// (nvml-STAMP.json) give it: YYYYMMDD-HHMMSS in UTC.
func Stamp(now time.Time) string { return now.UTC().Format("20060102-150405") }

// OutDir returns the output directory of a command of kind: dir, or
// DefaultDir where dir is "", created with its parents (mode 0755 less
// the umask). It is the one place a command's output directory is made.
func OutDir(dir, kind string, now time.Time) (string, error) {
	if dir == "" {
		dir = DefaultDir(kind, now)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("--out: %w", err)
	}
	return dir, nil
}

// WriteDoc writes f as dir/results.json (Write) and returns its path.
func WriteDoc(dir string, f *File) (string, error) {
	path := filepath.Join(dir, Name)
	if err := Write(path, f); err != nil {
		return "", fmt.Errorf("write results: %w", err)
	}
	return path, nil
}

// WriteJSON writes v as indented JSON, a newline after it, to path with
// WriteAtomic: the side files of a results directory (summary.json,
// advice.json).
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return WriteAtomic(path, append(b, '\n'))
}

// Encode writes f as --json prints it: the results document, as
// results.json holds it.
func Encode(w io.Writer, f *File) error {
	f.Version = Version
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(f)
}
