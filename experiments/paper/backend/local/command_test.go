package local

import (
	"strings"
	"testing"
)

func TestShellCommandsPass(t *testing.T) {
	for _, c := range []string{"while :; do :; done", "FOO=1 sh -c 'exit 0'", "cd /tmp && ls", "echo $PATH"} {
		if err := CheckCommand(c); err != nil {
			t.Errorf("%q: %v", c, err)
		}
	}
}

// FuzzCheckCommand: any text gives an answer, never a panic, and a
// command that passes is not blank.
func FuzzCheckCommand(f *testing.F) {
	for _, s := range []string{"while :; do :; done", "A=1 B=2 ./x", "=", "a=", "'", "sleep 1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if err := CheckCommand(s); err == nil && s != "" && strings.TrimSpace(s) == "" {
			t.Fatalf("blank command %q accepted", s)
		}
	})
}
