package suite

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	args := c.Programs[0].args("cuda-default", c.Seconds)
	if len(args) != 6 || !filepath.IsAbs(args[0]) || args[2] != "exit 0" || args[3] != "a b" || args[4] != "--seconds" || args[5] != "0.5" {
		t.Errorf("args %q", args)
	}
	if a := c.Programs[1].args("cuda-default", 2); len(a) != 1 {
		t.Errorf("a program that takes no --seconds got %q", a)
	}
	if c.CPU < 0 {
		t.Errorf("CPU %d: not resolved", c.CPU)
	}
}

// TestLinkedArm: the hybridsync-linked arm adds a program's Linked words
// and preloads nothing; a program without them cannot run that arm.
func TestLinkedArm(t *testing.T) {
	c := Config{Programs: []Program{{Name: "x", Command: "true --a", Linked: "--linked 'b c'"}},
		Dir: ".", Arms: []string{"cuda-default", "hybridsync-linked"}, Contention: []string{"none"}, Reps: 1, CPU: -1,
		Timeout: time.Second, CapQuota: time.Millisecond, CapPeriod: time.Millisecond}
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	if a := c.Programs[0].args("hybridsync-linked", 0); len(a) != 4 || a[2] != "--linked" || a[3] != "b c" {
		t.Errorf("linked arm args %q", a)
	}
	if a := c.Programs[0].args("cuda-default", 0); len(a) != 2 {
		t.Errorf("cuda-default args %q", a)
	}
	env := c.armEnv("hybridsync-linked", "/s.json")
	if len(env) != 1 || env[0] != "HYBRIDSYNC_STATS=/s.json" {
		t.Errorf("linked arm env %q, want the stats file alone", env)
	}
	c.Programs = append(c.Programs, Program{Name: "y", Command: "true"})
	if err := c.Check(); err == nil || !strings.Contains(err.Error(), "program y has no build that links") {
		t.Errorf("a program without linked words in the linked arm: %v", err)
	}
}

// The committed suites, of separate processes and in-process, name the
// same eight programs, and the suite of separate processes adds
// torch_omp4, whose 4 intra-op threads run on 4 CPUs; every Python
// program (a script, or the module given to inproc.py) is in
// experiments/apps.
func TestCommittedSuite(t *testing.T) {
	want := []string{"torch_infer", "torch_train", "cupy_stencil", "mixed_static", "launch_bound",
		"torch_infer_host", "torch_train_dataprep", "torch_two_threads"}
	for _, file := range []string{"suite.json", "inproc.json"} {
		want := want
		if file == "suite.json" {
			want = append(slices.Clone(want), "torch_omp4")
		}
		b, err := os.ReadFile(filepath.Join("..", file))
		if err != nil {
			t.Fatal(err)
		}
		ps, err := ParseSuite(b)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		var names []string
		for _, p := range ps {
			names = append(names, p.Name)
			if p.Name == "torch_omp4" && (p.CPUs != 4 || !strings.Contains(p.Command, "--threads 4")) {
				t.Errorf("%s: torch_omp4 on %d CPUs, %q: want 4 threads on 4 CPUs", file, p.CPUs, p.Command)
			}
			words, err := SplitWords(p.Command)
			if err != nil || len(words) < 2 || words[0] != "python3" {
				continue
			}
			script := words[1]
			if script == "inproc.py" && len(words) > 2 {
				script = words[2] + ".py"
			}
			if _, err := os.Stat(filepath.Join("..", script)); err != nil {
				t.Errorf("%s: %s: %v", file, p.Name, err)
			}
		}
		if !slices.Equal(names, want) {
			t.Errorf("%s names %v, want %v", file, names, want)
		}
	}
}

// TestParseResultHostS: a program's host_s (gromacs.py's CPU-side work)
// is kept in its run; one outside 0..wall_s is a bad result line.
func TestParseResultHostS(t *testing.T) {
	var r Run
	if _, err := parseResult([]byte("warming up\n{\"steps\":10,\"wall_s\":2,\"cpu_s\":2,\"host_s\":0.5}\n"), &r); err != nil || r.HostS == nil || *r.HostS != 0.5 {
		t.Errorf("host_s %v, %v; want 0.5", r.HostS, err)
	}
	r = Run{}
	if _, err := parseResult([]byte(`{"steps":10,"wall_s":2,"cpu_s":2}`), &r); err != nil || r.HostS != nil {
		t.Errorf("no host_s: %v, %v; want none", r.HostS, err)
	}
	for _, bad := range []string{`{"wall_s":2,"cpu_s":2,"host_s":3}`, `{"wall_s":2,"cpu_s":2,"host_s":-1}`} {
		if _, err := parseResult([]byte(bad), &Run{}); err == nil || !strings.Contains(err.Error(), "host_s") {
			t.Errorf("%s: %v, want an error naming host_s", bad, err)
		}
	}
}
