package discover

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Bounds on what discovery reads of a process's /proc files. Any user
// sets its own process's command line (up to 6 MiB), cgroup path and
// supplementary groups, so no read takes more than the file can hold
// from a process that is what it says; a longer one is cut or refused.
const (
	maxComm    = 64       // comm: 16 bytes with its newline
	maxStat    = 4 << 10  // stat: a 16-byte comm and 50 numbers
	maxCgroup  = 64 << 10 // cgroup: a PATH_MAX path per hierarchy
	maxStatus  = 1 << 20  // status: the Groups line of 65,536 groups
	maxCmdline = 1 << 20  // cmdline of a trusted process (cut beyond)
	// maxIdentity bounds a name or QMP path kept from a command line:
	// a longer name is cut (and later to MaxNameLen), a longer path
	// dropped (QEMU's unix sockets take 107 bytes).
	maxIdentity = 1024
)

// errTooLong: the file holds more than its bound.
var errTooLong = errors.New("longer than discovery reads")

// readBounded reads at most limit bytes of path; a longer file gives the
// first limit bytes and an error wrapping errTooLong.
func readBounded(path string, limit int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > limit {
		return b[:limit], fmt.Errorf("%s: %w (%d bytes)", path, errTooLong, limit)
	}
	return b, nil
}

// keep is what is kept of a value read from a command line: at most
// limit bytes, copied, so that no substring holds the whole line.
func keep(s string, limit int) string {
	if len(s) > limit {
		s = s[:limit]
	}
	return strings.Clone(s)
}
