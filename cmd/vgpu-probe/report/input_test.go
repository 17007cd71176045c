package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
	"github.com/vgpu-probe/vgpu-probe/input"
	"github.com/vgpu-probe/vgpu-probe/results"
)

// hangLimit turns a report that would block forever (on a FIFO, on
// stdin after a signal) into a failure; it is not a timing assertion.
const hangLimit = 30 * time.Second

// spoilt returns the sample results file with one value changed by spoil.
func spoilt(t *testing.T, spoil func(*results.File)) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testdata, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f results.File
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	spoil(&f)
	if b, err = json.Marshal(&f); err != nil {
		t.Fatal(err)
	}
	return b
}

// runBounded is runCmd with stdin, failing the test if it does not return.
func runBounded(t *testing.T, ctx context.Context, stdin []byte, args ...string) (string, error) {
	t.Helper()
	cmd := NewCmd(nil)
	var out bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetIn(bytes.NewReader(stdin))
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(hangLimit):
		t.Fatalf("report %q did not return", args)
		return "", nil
	}
}

func TestInputsThatAreNotMeasurementsAreRefused(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fifo := filepath.Join(dir, "fifo.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := write("big.json", nil)
	if err := os.Truncate(big, input.MaxBytes+1); err != nil { // sparse
		t.Fatal(err)
	}
	negative := write("negative.json", spoilt(t, func(f *results.File) { f.Cells[4].Median.WallS = -3 }))
	zero := write("zero.json", spoilt(t, func(f *results.File) { f.Cells[4].Median.WallS = 0 }))
	huge := write("huge.json", spoilt(t, func(f *results.File) { f.Cells[4].Median.WallS = 1e308 }))
	slowdown := write("slowdown.json", spoilt(t, func(f *results.File) { f.Cells[5].Slowdown = -3 }))
	stats := write("stats.json", []byte(`{"version":1,"mode":"hybrid","calls":2,"blocks":3}`))
	nvmlFile := write("nvml.json", []byte(`{"version":1,"interval_s":0.1,"samples":[{"gpu":0,"util_pct":140}]}`))
	snap, err := os.ReadFile(filepath.Join(testdata, "agent-snapshot.json"))
	if err != nil {
		t.Fatal(err)
	}
	snap = bytes.Replace(snap, []byte(`"steal_fraction": `), []byte(`"steal_fraction": -`), 1)
	badAgent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(snap) }))
	defer badAgent.Close()

	for _, tc := range []struct {
		name string
		args []string
		want string // on one line, after the file's name
	}{
		{"fifo", []string{fifo}, fifo + ": not a regular file (a named pipe)"},
		{"dev zero", []string{"/dev/zero"}, "/dev/zero: not a regular file (a character device)"},
		{"directory", []string{"--stats", dir}, dir + ": not a regular file (a directory)"},
		{"oversize", []string{"--nvml", big}, big + ": too large: 268435457 bytes, over the 256 MiB"},
		{"negative wall time", []string{negative}, negative + ": cells[4].median.wall_s = -3"},
		{"zero wall time", []string{zero}, zero + ": cells[4].median.wall_s = 0"},
		{"huge wall time", []string{huge}, huge + ": cells[4].median.wall_s = 1e+308"},
		{"negative slowdown", []string{slowdown}, slowdown + ": cells[5].slowdown = -3"},
		{"more ends than calls", []string{"--stats", stats}, stats + ": spin_hits + sleep_spin_hits + blocks = 3, more than calls = 2"},
		{"utilisation over 100", []string{"--nvml", nvmlFile}, nvmlFile + ": samples[0].util_pct = 140"},
		{"negative steal", []string{"--agent", badAgent.URL}, "agent " + badAgent.URL + ": snapshot: targets[0].threads[0].steal_fraction = -"},
		{"stdin twice", []string{"-", "--stats", "-"}, "- (stdin) given 2 times"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, "out-"+strings.ReplaceAll(tc.name, " ", "-")+".html")
			_, err := runBounded(t, context.Background(), nil, append(tc.args, "--format", "html", "-o", out)...)
			if !errors.Is(err, usage.ErrBadInput) {
				t.Errorf("err = %v, want bad input (exit 2)", err)
			}
			if err != nil && (!strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n")) {
				t.Errorf("err = %q, want one line containing %q", err, tc.want)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("output file left behind: %v", err)
			}
		})
	}
}

func TestResultsFromStdin(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testdata, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := runBounded(t, context.Background(), b, "-", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var r struct{ Sources []string }
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Sources) != 1 || r.Sources[0] != "-" {
		t.Errorf("sources = %v (%v), want [-]", r.Sources, err)
	}
	if _, err := runBounded(t, context.Background(), b[:len(b)/2], "-"); !errors.Is(err, usage.ErrBadInput) {
		t.Errorf("truncated stdin: %v", err)
	}
}

// TestInterruptedReadIsNotBadInput: a signal while stdin is read ends the
// report with the signal as the cause, which main maps to 128+n, not 2.
func TestInterruptedReadIsNotBadInput(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close() // nobody writes: the read blocks until the cancel
	defer r.Close()
	sig := errors.New("interrupt signal received")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(sig)
	o := &Options{Results: []string{"-"}, Format: "text", In: r, Out: &bytes.Buffer{}, Err: &bytes.Buffer{}, Now: time.Now}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	select {
	case err := <-done:
		if !errors.Is(err, sig) || errors.Is(err, usage.ErrBadInput) {
			t.Errorf("err = %v, want the signal and not bad input", err)
		}
	case <-time.After(hangLimit):
		t.Fatal("Run kept reading stdin after the context ended")
	}
}
