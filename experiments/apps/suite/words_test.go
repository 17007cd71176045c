package suite

import (
	"fmt"
	"slices"
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
		if got := fmt.Sprint(Rotate([]string{"a", "b", "c"}, k)); got != want {
			t.Errorf("rotate %d = %s, want %s", k, got, want)
		}
	}
}

// A command line is quoted so that SplitWords gives its words back, shown
// quoted only where a shell needs it, and named in a program name's characters.
func TestProgramWords(t *testing.T) {
	argv := []string{"/opt/my app/run", "it's", "a b", "--x=1"}
	back, err := SplitWords(QuoteWords(argv))
	if err != nil || !slices.Equal(back, argv) {
		t.Errorf("QuoteWords: %q back as %q, %v", QuoteWords(argv), back, err)
	}
	if got := ShellWords(argv); got != `'/opt/my app/run' 'it'\''s' 'a b' --x=1` {
		t.Errorf("ShellWords: %s", got)
	}
	for in, want := range map[string]string{"sleep": "sleep", "./my app": "my_app", "/x/_hidden": "p_hidden", "python3.12": "python3.12"} {
		if got := ProgramName(in); got != want || !nameRE.MatchString(got) {
			t.Errorf("ProgramName(%q) = %q, want %q", in, got, want)
		}
	}
}
