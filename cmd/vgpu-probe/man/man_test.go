package man

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
)

func tree() *cobra.Command {
	root := &cobra.Command{Use: "vgpu-probe", Short: "root", Version: "v9.9"}
	agent := &cobra.Command{Use: "agent", Short: "host agent", Run: func(*cobra.Command, []string) {}}
	agent.Flags().String("listen", "127.0.0.1:9477", "address of /metrics")
	root.AddCommand(agent, NewCmd())
	return root
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n []string
	for _, e := range ents {
		n = append(n, e.Name())
	}
	return n
}

func TestWrite(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000") // Nov 2023
	dir := filepath.Join(t.TempDir(), "man1")
	if err := Write(tree(), dir); err != nil {
		t.Fatal(err)
	}
	got := names(t, dir)
	// The hidden man command has no page; cobra's completion command has.
	for _, want := range []string{"vgpu-probe.1", "vgpu-probe-agent.1", "vgpu-probe-completion-bash.1"} {
		if !slices.Contains(got, want) {
			t.Errorf("pages %v: no %s", got, want)
		}
	}
	for _, n := range got {
		if strings.HasPrefix(n, "vgpu-probe-man") || strings.HasPrefix(n, ".") {
			t.Errorf("pages %v: %s should not be there", got, n)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "vgpu-probe-agent.1"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, want := range []string{`.TH "VGPU-PROBE" "1" "Nov 2023" "vgpu-probe v9.9"`, "listen", "127.0.0.1:9477"} {
		if !strings.Contains(page, want) {
			t.Errorf("vgpu-probe-agent.1 lacks %q:\n%s", want, page)
		}
	}
}

func TestWriteBadDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := Write(tree(), filepath.Join(file, "man1"))
	if !errors.Is(err, usage.ErrBadInput) {
		t.Fatalf("a directory under a file: %v, want a bad-input error", err)
	}
}
