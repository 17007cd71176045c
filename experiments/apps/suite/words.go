package suite

import (
	"errors"
	"path/filepath"
	"regexp"
	"strings"
)

// SplitWords splits a command line into words as a POSIX shell would,
// without expanding anything: blanks separate words, 'single quotes' keep
// everything, "double quotes" keep everything but \" \\ \$ \`, and a
// backslash outside quotes escapes the next character.
func SplitWords(s string) ([]string, error) {
	var words []string
	var cur []rune
	inWord := false
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, string(cur))
				cur, inWord = cur[:0:0], false
			}
		case c == '\\':
			if i+1 >= len(rs) {
				return nil, errors.New("command ends with a backslash")
			}
			i++
			cur, inWord = append(cur, rs[i]), true
		case c == '\'':
			j := i + 1
			for j < len(rs) && rs[j] != '\'' {
				j++
			}
			if j >= len(rs) {
				return nil, errors.New("unterminated ' quote")
			}
			cur, inWord = append(cur, rs[i+1:j]...), true
			i = j
		case c == '"':
			j := i + 1
			for ; j < len(rs) && rs[j] != '"'; j++ {
				if rs[j] == '\\' && j+1 < len(rs) && (rs[j+1] == '"' || rs[j+1] == '\\' || rs[j+1] == '$' || rs[j+1] == '`') {
					j++
				}
				cur = append(cur, rs[j])
			}
			if j >= len(rs) {
				return nil, errors.New(`unterminated " quote`)
			}
			inWord = true
			i = j
		default:
			cur, inWord = append(cur, c), true
		}
	}
	if inWord {
		words = append(words, string(cur))
	}
	return words, nil
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// ProgramName is the program's name in the results: its file's name in
// the characters a program name may have.
func ProgramName(argv0 string) string {
	n := unsafeName.ReplaceAllString(filepath.Base(argv0), "_")
	if !nameRE.MatchString(n) {
		n = "p" + n
	}
	return n
}

// QuoteWords quotes every word so that SplitWords gives them back.
func QuoteWords(argv []string) string {
	q := make([]string, len(argv))
	for i, w := range argv {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

var plainWord = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// ShellWords is argv as a shell command line: words quoted only where
// they need it.
func ShellWords(argv []string) string {
	q := make([]string, len(argv))
	for i, w := range argv {
		q[i] = w
		if !plainWord.MatchString(w) {
			q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}
