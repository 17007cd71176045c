package job

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"
)

// runCommand runs a command job to its end. A command that ran is a
// result whatever its exit status (the host judges it); one that could
// not start is an error.
func runCommand(j Job) (*CommandResult, error) {
	if j.File != "" {
		if err := os.Remove(j.File); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	cmd := exec.Command(j.Argv[0], j.Argv[1:]...)
	cmd.Env = append(os.Environ(), j.Env...)
	// Its stdout goes to the guest console, as this process's does.
	stderr := &tailBuffer{max: MaxStderr}
	cmd.Stdout, cmd.Stderr = os.Stdout, stderr
	t0 := time.Now()
	err := cmd.Run()
	r := &CommandResult{WallS: time.Since(t0).Seconds(), Stderr: string(stderr.b)}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.ExitCode = exit.ExitCode()
	case err != nil:
		return nil, fmt.Errorf("command %s: %w", j.Argv[0], err)
	}
	if j.File != "" {
		r.File, r.FileError = readLimited(j.File, MaxFile)
	}
	return r, nil
}

// readLimited returns the file's content, or why it has none.
func readLimited(path string, limit int64) (string, string) {
	f, err := os.Open(path)
	if err != nil {
		return "", err.Error()
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	switch {
	case err != nil:
		return "", err.Error()
	case int64(len(b)) > limit:
		return "", fmt.Sprintf("%s: larger than %d bytes", path, limit)
	}
	return string(b), ""
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	b   []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}
