package input

import (
	"cmp"
	"encoding/json"
	"fmt"
)

// Format is a versioned JSON file format (results files, NVML samples,
// hybridsync stats), as Decode's errors name it.
type Format struct {
	// File is what a file of it is, article included: "a results file".
	File string
	// Version is what its version is called: "format version".
	Version string
	// Newest is the newest version this build reads.
	Newest int
	// Newer is the sentinel that a newer version's error wraps.
	Newer error
	// Unnamed is what a file whose version reads 0 lacks (default "no
	// version").
	Unnamed string
}

// Decode decodes a file of format f (name is what errors call it) into v,
// then wants the version that version reads from v to be one this build
// reads (1 to f.Newest), then runs check. Every error is one line naming
// the file.
func (f Format) Decode(name string, b []byte, v any, version func() int, check func() error) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: not %s: %w", name, f.File, err)
	}
	switch n := version(); {
	case n > f.Newest:
		return fmt.Errorf("%s: %s %d: %w (this one reads up to %d)", name, f.Version, n, f.Newer, f.Newest)
	case n < 1:
		return fmt.Errorf("%s: not %s (%s)", name, f.File, cmp.Or(f.Unnamed, "no version"))
	}
	if err := check(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
