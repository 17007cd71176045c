package input

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hangLimit bounds a call that would block forever without the fix; it is
// not a timing assertion, only what turns a hang into a failure.
const hangLimit = 30 * time.Second

// readFileBounded is ReadFile, failing the test if it does not return.
func readFileBounded(t *testing.T, path string) ([]byte, error) {
	t.Helper()
	type res struct {
		b   []byte
		err error
	}
	done := make(chan res, 1)
	go func() {
		b, err := ReadFile(context.Background(), path)
		done <- res{b, err}
	}()
	select {
	case r := <-done:
		return r.b, r.err
	case <-time.After(hangLimit):
		t.Fatalf("ReadFile(%s) blocked", path)
		return nil, nil
	}
}

func TestReadFileRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "results.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		fifo:        "a named pipe",
		"/dev/zero": "a character device",
		dir:         "a directory",
	} {
		b, err := readFileBounded(t, path)
		if !errors.Is(err, ErrNotRegular) || b != nil {
			t.Errorf("%s: %d bytes, %v; want ErrNotRegular", path, len(b), err)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, path+": ") || !strings.Contains(msg, want) || strings.Contains(msg, "\n") {
			t.Errorf("%s: error %q does not name the file and %q on one line", path, msg, want)
		}
	}
}

func TestReadFileRefusesAnOversizeFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.json")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	// Sparse: one byte over the bound costs no disk.
	if err := f.Truncate(MaxBytes + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := readFileBounded(t, path); !errors.Is(err, ErrTooLarge) || !strings.HasPrefix(err.Error(), path+": ") {
		t.Errorf("err = %v, want ErrTooLarge naming %s", err, path)
	}
}

func TestReadFileReadsARegularFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.json")
	os.WriteFile(path, []byte(`{"version":1}`), 0o644)
	b, err := readFileBounded(t, path)
	if err != nil || string(b) != `{"version":1}` {
		t.Fatalf("ReadFile = %q, %v", b, err)
	}
	if _, err := readFileBounded(t, filepath.Join(t.TempDir(), "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// zeros is an endless stream, as /dev/zero on stdin is.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func TestReadFromStopsAtTheBound(t *testing.T) {
	// A small bound: the logic is the same, and reading 256 MiB under the
	// race detector takes many seconds.
	const limit = 64 << 10
	b, err := readFrom(context.Background(), "- (stdin)", zeros{}, limit)
	if !errors.Is(err, ErrTooLarge) || b != nil || !strings.HasPrefix(err.Error(), "- (stdin): ") {
		t.Fatalf("%d bytes, %v; want ErrTooLarge naming stdin", len(b), err)
	}
	b, err = readFrom(context.Background(), "-", io.LimitReader(zeros{}, limit), limit)
	if err != nil || len(b) != limit {
		t.Fatalf("exactly the bound: %d bytes, %v", len(b), err)
	}
}

func TestReadFromReturnsWhenCancelledWhileBlocked(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close() // nobody writes: the read blocks until this
	defer r.Close()
	interrupted := errors.New("interrupt signal received")
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := ReadFrom(ctx, "- (stdin)", r)
		done <- err
	}()
	cancel(interrupted)
	select {
	case err := <-done:
		if !errors.Is(err, interrupted) {
			t.Errorf("err = %v, want the context's cause", err)
		}
	case <-time.After(hangLimit):
		t.Fatal("ReadFrom ignored the cancelled context")
	}
}

func TestReadFromPassesReadErrorsOn(t *testing.T) {
	boom := errors.New("boom")
	r := io.MultiReader(bytes.NewReader([]byte("{")), errReader{boom})
	if _, err := ReadFrom(context.Background(), "x.json", r); !errors.Is(err, boom) || !strings.Contains(err.Error(), "x.json") {
		t.Errorf("err = %v", err)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		v                   float64
		rangeOK, positiveOK bool
	}{
		{1, true, true},
		{0, true, false},
		{-3, false, false},
		{1e308, false, false},
		{math.Inf(1), false, false},
		{math.NaN(), false, false},
		{MaxSeconds, true, true},
	} {
		var r, p Check
		r.Range("cells[0].median.wall_s", tc.v, 0, MaxSeconds)
		p.Positive("cells[0].median.wall_s", tc.v, MaxSeconds)
		if (r.Err() == nil) != tc.rangeOK || (p.Err() == nil) != tc.positiveOK {
			t.Errorf("%g: Range %v, Positive %v", tc.v, r.Err(), p.Err())
		}
		if err := p.Err(); err != nil && !strings.HasPrefix(err.Error(), "cells[0].median.wall_s = ") {
			t.Errorf("%g: %q does not name the field", tc.v, err)
		}
	}
	var c Check
	c.Count("reps", -1)
	c.Range("later", -1, 0, 1)
	if err := c.Err(); err == nil || !strings.HasPrefix(err.Error(), "reps = -1") {
		t.Errorf("first failure not kept: %v", err)
	}
}
