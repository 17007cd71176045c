package job

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// ErrBadJob is wrapped by RunFrom's errors about the job it was given
// (none, or one that does not parse); their messages are the reason alone.
var ErrBadJob = errors.New("bad job")

type badJob struct{ msg string }

func (e *badJob) Error() string        { return e.msg }
func (e *badJob) Is(target error) bool { return target == ErrBadJob }

// RunFrom parses spec (CmdlineKey's value; "" reads it from
// /proc/cmdline), opens port (""; the port named PortName) and runs the
// job over it with RunGuest.
func RunFrom(spec, port string) error {
	if spec == "" {
		b, _ := os.ReadFile("/proc/cmdline")
		for _, f := range strings.Fields(string(b)) {
			if v, ok := strings.CutPrefix(f, CmdlineKey+"="); ok {
				spec = v
			}
		}
	}
	if spec == "" {
		return &badJob{"no job: give --job or boot with " + CmdlineKey + "= on the kernel command line"}
	}
	j, err := ParseCmdlineValue(spec)
	if err != nil {
		return &badJob{err.Error()}
	}
	if port == "" {
		if port, err = FindPort(PortName); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(port, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("job port: %w", err)
	}
	defer f.Close()
	return RunGuest(j, f)
}
