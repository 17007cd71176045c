package input

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// MaxBytes bounds one input, and an agent's response (profiler/agentapi):
// the largest inputs are results files that embed agent snapshots, and
// agent timelines, a few MB a page.
const MaxBytes = 256 << 20

// ErrNotRegular means a path names something other than a regular file.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge means an input holds more than MaxBytes.
var ErrTooLarge = errors.New("too large")

// ReadFile reads the regular file at path, refusing anything else without
// waiting on it, and returns early with the context's cause when ctx ends.
func ReadFile(ctx context.Context, path string) ([]byte, error) {
	// Stat first: opening some devices has effects of its own.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := regular(path, fi); err != nil {
		return nil, err
	}
	// O_NONBLOCK: should path have become a FIFO since the Stat, the open
	// returns instead of waiting for a writer, and the Stat below refuses it.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if err := regular(path, fi); err != nil {
		return nil, err
	}
	return ReadFrom(ctx, path, f)
}

// regular refuses what is not a regular file, and a file already larger
// than MaxBytes, naming path and what it is.
func regular(path string, fi fs.FileInfo) error {
	m := fi.Mode()
	if !m.IsRegular() {
		return fmt.Errorf("%s: %w (%s), refused without reading it", path, ErrNotRegular, kind(m))
	}
	if fi.Size() > MaxBytes {
		return tooLarge(path, fmt.Sprintf("%d bytes", fi.Size()), MaxBytes)
	}
	return nil
}

func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "mode " + m.String()
}

func tooLarge(name, size string, limit int) error {
	return fmt.Errorf("%s: %w: %s, over the %d MiB an input may hold", name, ErrTooLarge, size, limit>>20)
}

// ReadFrom reads r, which name describes in errors, to its end or to
// MaxBytes, whichever comes first. The read runs in a goroutine so that a
// cancelled ctx returns at once even while r blocks (a terminal or a pipe
// nobody writes to); that goroutine then ends when r does, which for stdin
// is when the process exits.
func ReadFrom(ctx context.Context, name string, r io.Reader) ([]byte, error) {
	return readFrom(ctx, name, r, MaxBytes)
}

// readFrom is ReadFrom up to limit bytes.
func readFrom(ctx context.Context, name string, r io.Reader, limit int) ([]byte, error) {
	type read struct {
		b   []byte
		err error
	}
	done := make(chan read, 1)
	go func() {
		b, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
		done <- read{b, err}
	}()
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("reading %s: %w", name, context.Cause(ctx))
	case res := <-done:
		var pe *fs.PathError
		switch {
		case errors.As(res.err, &pe):
			return nil, res.err // it names the file already
		case res.err != nil:
			return nil, fmt.Errorf("reading %s: %w", name, res.err)
		case len(res.b) > limit:
			return nil, tooLarge(name, fmt.Sprintf("more than %d bytes", limit), limit)
		}
		return res.b, nil
	}
}
