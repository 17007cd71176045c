package hintpage

import "testing"

// An empty word and a quote survive the quoting.
func TestShellJoin(t *testing.T) {
	if got := shellJoin([]string{"", "a'b", "plain/path,x=1"}); got != `'' 'a'\''b' plain/path,x=1` {
		t.Errorf("shellJoin: %s", got)
	}
}
