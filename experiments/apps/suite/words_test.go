package suite

import (
	"fmt"
	"testing"
)

func TestSplitWords(t *testing.T) {
	for in, want := range map[string][]string{
		"a b  c":                  {"a", "b", "c"},
		`python3 'x y.py' --n 1`:  {"python3", "x y.py", "--n", "1"},
		`a "b \"c\" \$d \n" e\ f`: {"a", `b "c" $d \n`, "e f"},
		`''`:                      {""},
		"  ":                      nil,
	} {
		got, err := SplitWords(in)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want) || len(got) != len(want) {
			t.Errorf("SplitWords(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{`a 'b`, `a "b`, `a\`} {
		if _, err := SplitWords(bad); err == nil {
			t.Errorf("SplitWords(%q): no error", bad)
		}
	}
}

func TestRotate(t *testing.T) {
	for k, want := range []string{"[a b c]", "[b c a]", "[c a b]", "[a b c]"} {
		if got := fmt.Sprint(rotate([]string{"a", "b", "c"}, k)); got != want {
			t.Errorf("rotate %d = %s, want %s", k, got, want)
		}
	}
}
