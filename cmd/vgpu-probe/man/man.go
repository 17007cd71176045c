// Package man is `vgpu-probe man DIR`, hidden: it writes a man page for
// every visible command into DIR (vgpu-probe.1, vgpu-probe-agent.1, ...),
// from the same cobra commands that parse the flags, so the pages cannot
// drift from the binary. `make man` runs it; the pages are not committed.
package man

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/usage"
)

// NewCmd returns the man command.
func NewCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "man DIR",
		Short:  "Write the man pages of every command into DIR (used by make man)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return Write(cmd.Root(), args[0])
		},
	}
}

// Write generates the pages of root and its visible subcommands into dir,
// creating it. The pages are generated in a temporary directory inside dir
// and moved in only when all of them were written, so a failure leaves no
// partial set behind. The date in the pages is SOURCE_DATE_EPOCH's when
// set (reproducible builds), else today's.
func Write(root *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return usage.Errorf("man: %v", err)
	}
	tmp, err := os.MkdirTemp(dir, ".man-")
	if err != nil {
		return fmt.Errorf("man: %w", err)
	}
	defer os.RemoveAll(tmp)
	header := &doc.GenManHeader{
		Title:   "VGPU-PROBE",
		Section: "1",
		Source:  "vgpu-probe " + root.Version,
		Manual:  "vgpu-probe manual",
	}
	// cobra adds its completion command when the root executes; a tree
	// that has not run yet (tests) gets it here, so the pages match.
	root.InitDefaultCompletionCmd()
	if err := doc.GenManTree(root, header, tmp); err != nil {
		return fmt.Errorf("man: generating pages: %w", err)
	}
	pages, err := filepath.Glob(filepath.Join(tmp, "*.1"))
	if err != nil || len(pages) == 0 {
		return fmt.Errorf("man: no pages generated (%v)", err)
	}
	for _, p := range pages {
		if err := os.Rename(p, filepath.Join(dir, filepath.Base(p))); err != nil {
			return fmt.Errorf("man: %w", err)
		}
	}
	return nil
}
