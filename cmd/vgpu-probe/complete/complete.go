// Package complete gives the commands' flags shell completion of their
// values (through cobra's hidden __complete command, which the bash, zsh
// and fish scripts call): one of a fixed list, a comma-separated list of
// them, a file by extension, a directory. The lists are the ones the
// flags are checked against, passed in, never written here.
package complete

import (
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
)

// One completes a flag that takes one of names.
func One(names ...string) cobra.CompletionFunc {
	return cobra.FixedCompletions(names, cobra.ShellCompDirectiveNoFileComp)
}

// List completes a comma-separated list of names (a string-slice flag):
// what was typed up to its last comma, then each name not in it yet. No
// space follows, so that another comma can.
func List(names ...string) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		i := strings.LastIndex(toComplete, ",")
		typed, prefix := toComplete[:i+1], toComplete[i+1:]
		have := strings.Split(typed, ",")
		var out []cobra.Completion
		for _, n := range names {
			if strings.HasPrefix(n, prefix) && !slices.Contains(have, n) {
				out = append(out, typed+n)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	}
}

// Mitigate completes --mitigate (agent, bench) to its key, "slice=", as
// mitigate.Usage spells it, and lets the user type the duration.
func Mitigate(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	key, _, _ := strings.Cut(mitigate.Usage, "=")
	return []cobra.Completion{key + "="}, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
}

// Files completes a path to a file whose name ends in .EXT, one of exts.
func Files(exts ...string) cobra.CompletionFunc {
	return cobra.FixedCompletions(exts, cobra.ShellCompDirectiveFilterFileExt)
}

// AnyFile completes a path to any file.
func AnyFile(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return nil, cobra.ShellCompDirectiveDefault
}

// Dirs completes a path to a directory.
func Dirs(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return nil, cobra.ShellCompDirectiveFilterDirs
}

// Users completes a local user's name (those /etc/passwd lists, where
// QEMU's users are).
func Users(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	b, _ := os.ReadFile("/etc/passwd")
	var out []cobra.Completion
	for _, line := range strings.Split(string(b), "\n") {
		if name, _, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(name, toComplete) {
			out = append(out, name)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// Flags registers each flag's completion; a name that is no flag of cmd
// is a mistake in the command, reported as cobra reports one.
func Flags(cmd *cobra.Command, fns map[string]cobra.CompletionFunc) {
	for name, fn := range fns {
		cobra.CheckErr(cmd.RegisterFlagCompletionFunc(name, fn))
	}
}
