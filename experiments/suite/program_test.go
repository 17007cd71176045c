package suite

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestCheck resolves a program's command into words with an absolute
// program path and passes --seconds only to programs that take it.
func TestCheck(t *testing.T) {
	no := false
	c := Config{Programs: []Program{{Name: "x", Command: `sh -c "exit 0" 'a b'`}, {Name: "y", Command: "true", Seconds: &no}},
		Dir: ".", Arms: []string{"cuda-default"}, Contention: []string{"none"}, Reps: 1, CPU: -1, Seconds: 0.5,
		Timeout: time.Second, CapQuota: time.Millisecond, CapPeriod: time.Millisecond}
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	args := c.Programs[0].args(c.Seconds)
	if len(args) != 6 || !filepath.IsAbs(args[0]) || args[2] != "exit 0" || args[3] != "a b" || args[4] != "--seconds" || args[5] != "0.5" {
		t.Errorf("args %q", args)
	}
	if a := c.Programs[1].args(2); len(a) != 1 {
		t.Errorf("a program that takes no --seconds got %q", a)
	}
	if c.CPU < 0 {
		t.Errorf("CPU %d: not resolved", c.CPU)
	}
}

// The committed suite names the five programs.
func TestCommittedSuite(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "apps", "suite.json"))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := ParseSuite(b)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range ps {
		names = append(names, p.Name)
	}
	for _, want := range []string{"torch_infer", "torch_train", "cupy_stencil", "mixed_static", "launch_bound"} {
		if !slices.Contains(names, want) {
			t.Errorf("suite.json lacks %s: %v", want, names)
		}
	}
}
