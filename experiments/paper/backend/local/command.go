package local

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// CheckCommand rejects an empty command or one whose program is not
// found. Commands that use shell syntax before the program name are left
// to the shell.
func CheckCommand(cmd string) error {
	if cmd == "" {
		return nil
	}
	fields := strings.Fields(cmd)
	if len(fields) == 0 {
		return errors.New("empty command")
	}
	prog := ""
	for _, f := range fields {
		if k, _, ok := strings.Cut(f, "="); ok && k != "" && !strings.ContainsAny(k, "/'\"$") {
			continue // VAR=value before the program
		}
		prog = f
		break
	}
	if prog == "" || strings.ContainsAny(prog, "'\"$`(){};|&<>*?[]\\") || isShellWord(prog) {
		return nil
	}
	if _, err := exec.LookPath(prog); err != nil {
		return fmt.Errorf("%s: command not found", prog)
	}
	return nil
}

func isShellWord(w string) bool {
	switch w {
	case "while", "for", "if", "until", "case", "exec", "cd", "export", ":", ".", "!", "{", "(", "set", "eval", "true", "false", "echo", "sleep":
		return true
	}
	return false
}
