package hintpage

import "strings"

// QEMUArgsLine is QEMUArgs as one line that a POSIX shell reads back as
// the same words (for a script's eval, or Proxmox's args: line).
func QEMUArgsLine(dir, target string) string { return shellJoin(QEMUArgs(dir, target)) }

// shellJoin joins args into one line that a POSIX shell reads back as
// the same words: an argument made only of characters no shell treats
// specially is written as it is, any other in single quotes, with each
// single quote in it written as quote, backslash, quote, quote (close,
// an escaped quote, reopen).
func shellJoin(args []string) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(shellQuote(a))
	}
	return b.String()
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
