package promsource

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// A Selector is a parsed --match: label matchers that every query's
// metric selectors carry, e.g. {job="gpu", instance=~"rack1-.*"}.
type Selector struct {
	matchers []string // normalised: name op "value"
}

// String is the selector as PromQL, "{}" when it matches everything.
func (s Selector) String() string { return "{" + s.inner() + "}" }

// inner is the matchers without braces, to add to a metric's selector.
func (s Selector) inner() string { return strings.Join(s.matchers, ", ") }

var (
	labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*`)
	// Longest operators first, so that "=~" is not read as "=".
	matchOps = []string{"=~", "!~", "!=", "="}
)

// ParseSelector checks a --match value: braces around comma-separated
// matchers LABEL OP "VALUE" (OP one of = != =~ !~; the value in double,
// single or back quotes; regexps must compile). It is a small parser of
// that one production of PromQL, not of the language: a metric name or
// an expression is refused with a one-line reason, before any query.
func ParseSelector(s string) (Selector, error) {
	bad := func(why string) (Selector, error) {
		return Selector{}, fmt.Errorf("--match %q: %s; want a selector like '{job=\"gpu\", instance=~\"rack1-.*\"}'", s, why)
	}
	rest := strings.TrimSpace(s)
	if rest == "" {
		return Selector{}, nil
	}
	if !strings.HasPrefix(rest, "{") || !strings.HasSuffix(rest, "}") {
		return bad("not in braces")
	}
	rest = strings.TrimSpace(rest[1 : len(rest)-1])
	var sel Selector
	for rest != "" {
		m, tail, err := parseMatcher(rest)
		if err != nil {
			return bad(err.Error())
		}
		sel.matchers = append(sel.matchers, m)
		rest = strings.TrimSpace(tail)
		if rest == "" {
			break
		}
		if rest[0] != ',' {
			return bad(fmt.Sprintf("expected ',' before %q", rest))
		}
		rest = strings.TrimSpace(rest[1:])
	}
	return sel, nil
}

// parseMatcher reads one LABEL OP "VALUE" from the start of s and returns
// it normalised, and what follows it.
func parseMatcher(s string) (m, rest string, err error) {
	name := labelName.FindString(s)
	if name == "" {
		return "", "", fmt.Errorf("expected a label name at %q", s)
	}
	if name == "__name__" {
		return "", "", fmt.Errorf("__name__ is set by each query, not by --match")
	}
	s = strings.TrimSpace(s[len(name):])
	op := ""
	for _, o := range matchOps {
		if strings.HasPrefix(s, o) {
			op = o
			break
		}
	}
	if op == "" {
		return "", "", fmt.Errorf("expected =, !=, =~ or !~ after %s", name)
	}
	val, rest, err := parseString(strings.TrimSpace(s[len(op):]))
	if err != nil {
		return "", "", fmt.Errorf("%s%s: %w", name, op, err)
	}
	if op == "=~" || op == "!~" {
		// Prometheus anchors regexps and uses RE2, as Go does.
		if _, err := regexp.Compile("^(?:" + val + ")$"); err != nil {
			return "", "", fmt.Errorf("%s%s: %w", name, op, err)
		}
	}
	return name + op + strconv.Quote(val), rest, nil
}

// parseString reads a PromQL string literal from the start of s: Go's
// escapes in double quotes, the same in single quotes, none in back
// quotes.
func parseString(s string) (val, rest string, err error) {
	if s == "" {
		return "", "", fmt.Errorf("expected a quoted value")
	}
	q := s[0]
	if q != '"' && q != '\'' && q != '`' {
		return "", "", fmt.Errorf("expected a quoted value at %q", s)
	}
	end := -1
	for i := 1; i < len(s); i++ {
		if s[i] == '\\' && q != '`' {
			i++
			continue
		}
		if s[i] == q {
			end = i
			break
		}
	}
	if end < 0 {
		return "", "", fmt.Errorf("unterminated string %s", s)
	}
	lit := s[:end+1]
	if q == '\'' {
		lit = requote(lit[1:end])
	}
	val, err = strconv.Unquote(lit)
	if err != nil {
		return "", "", fmt.Errorf("bad string %s: %w", s[:end+1], err)
	}
	return val, s[end+1:], nil
}

// requote turns the body of a single-quoted PromQL string into a Go
// double-quoted literal (Go reads single quotes as a rune): \' becomes ',
// a bare " is escaped, other escapes stay.
func requote(body string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(body); i++ {
		switch c := body[i]; {
		case c == '\\' && i+1 < len(body) && body[i+1] == '\'':
			b.WriteByte('\'')
			i++
		case c == '\\' && i+1 < len(body):
			b.WriteString(body[i : i+2])
			i++
		case c == '"':
			b.WriteString(`\"`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
