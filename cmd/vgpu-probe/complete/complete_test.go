package complete

import (
	"slices"
	"testing"

	"github.com/spf13/cobra"

	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
)

// A list offers the names not given yet, after what was typed.
func TestList(t *testing.T) {
	fn := List("spin", "block", "hybrid")
	for _, tc := range []struct {
		typed string
		want  []string
	}{
		{"", []string{"spin", "block", "hybrid"}},
		{"b", []string{"block"}},
		{"spin,", []string{"spin,block", "spin,hybrid"}},
		{"spin,block,h", []string{"spin,block,hybrid"}},
		{"spin,block,hybrid,", nil},
		{"x", nil},
	} {
		got, dir := fn(nil, nil, tc.typed)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q: %q, want %q", tc.typed, got, tc.want)
		}
		if dir != cobra.ShellCompDirectiveNoFileComp|cobra.ShellCompDirectiveNoSpace {
			t.Errorf("%q: directive %v", tc.typed, dir)
		}
	}
}

// Flags registers each completion on its flag.
func TestFlags(t *testing.T) {
	cmd := &cobra.Command{Use: "x"}
	cmd.Flags().String("format", "", "")
	Flags(cmd, map[string]cobra.CompletionFunc{"format": One("a", "b")})
	fn, ok := cmd.GetFlagCompletionFunc("format")
	if !ok {
		t.Fatal("--format has no completion")
	}
	if got, _ := fn(cmd, nil, ""); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("--format: %q", got)
	}
}

// --mitigate's completion and a duration make a value the agent accepts.
func TestMitigate(t *testing.T) {
	got, _ := Mitigate(nil, nil, "")
	if len(got) != 1 {
		t.Fatalf("%q, want one prefix", got)
	}
	if _, err := mitigate.Parse(got[0] + "100us"); err != nil {
		t.Errorf("%q + a duration: %v", got[0], err)
	}
}
