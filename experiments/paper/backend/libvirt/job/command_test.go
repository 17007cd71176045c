package job

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A command job answers with the command's exit status, its stderr (the
// end of it) and the file it wrote; a file left from before is not sent
// back as this run's.
func TestCommand(t *testing.T) {
	file := filepath.Join(t.TempDir(), "out")
	if err := os.WriteFile(file, []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `echo "to stderr $GREETING" >&2; [ "$WRITE" = 1 ] && echo written >"$FILE"; exit 3`
	r := (&guest{}).do(Job{ID: 1, Kind: Command, Argv: []string{"sh", "-c", script}, Env: []string{"GREETING=hi", "WRITE=1", "FILE=" + file}, File: file})
	c := r.Command
	if r.Type != TypeResult || c == nil || c.ExitCode != 3 || c.Stderr != "to stderr hi\n" || c.File != "written\n" || c.WallS <= 0 {
		t.Fatalf("reply %+v, command %+v", r, c)
	}
	r = (&guest{}).do(Job{ID: 2, Kind: Command, Argv: []string{"sh", "-c", script}, Env: []string{"WRITE=0"}, File: file})
	if c := r.Command; c == nil || c.File != "" || !strings.Contains(c.FileError, "no such file") {
		t.Errorf("no file written: command %+v, want the file's absence said", c)
	}
	r = (&guest{}).do(Job{ID: 3, Kind: Command, Argv: []string{filepath.Join(t.TempDir(), "missing")}})
	if r.Type != TypeError || !strings.Contains(r.Error, "missing") {
		t.Errorf("a program that does not exist: %+v, want an error naming it", r)
	}
}

func TestTailBuffer(t *testing.T) {
	b := &tailBuffer{max: 4}
	for _, s := range []string{"ab", "cdef", "g"} {
		b.Write([]byte(s))
	}
	if string(b.b) != "defg" {
		t.Errorf("kept %q, want the last 4 bytes \"defg\"", b.b)
	}
}
