package main

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/vgpu-probe/vgpu-probe/agent/mitigate"
	"github.com/vgpu-probe/vgpu-probe/cmd/vgpu-probe/report"
	"github.com/vgpu-probe/vgpu-probe/experiments/apps/suite"
	"github.com/vgpu-probe/vgpu-probe/experiments/corunner"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/scenario"
	"github.com/vgpu-probe/vgpu-probe/experiments/paper/workload"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/vmimages"
)

// suggest runs the hidden __complete command, as the shell scripts do,
// and returns its suggestions and directive.
func suggest(t *testing.T, args ...string) ([]string, cobra.ShellCompDirective) {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(append([]string{cobra.ShellCompRequestCmd}, args...), &out, &errb); code != 0 {
		t.Fatalf("__complete %q: exit %d: %s", args, code, errb.String())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	last := lines[len(lines)-1]
	d, err := strconv.Atoi(strings.TrimPrefix(last, ":"))
	if !strings.HasPrefix(last, ":") || err != nil {
		t.Fatalf("__complete %q: no directive line in %q", args, out.String())
	}
	return lines[:len(lines)-1], cobra.ShellCompDirective(d)
}

func prefixed(prefix string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = prefix + n
	}
	return out
}

const (
	one  = cobra.ShellCompDirectiveNoFileComp
	list = cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	ext  = cobra.ShellCompDirectiveFilterFileExt
	dirs = cobra.ShellCompDirectiveFilterDirs
	file = cobra.ShellCompDirectiveDefault
)

// Each flag with a fixed set of values suggests that set, from the list
// the flag is checked against; a comma-separated flag suggests the rest
// of its list after what was typed; a path flag gets files (by
// extension) or directories from the shell.
func TestCompleteFlagValues(t *testing.T) {
	modes := hybridsync.Modes()
	for _, tc := range []struct {
		args []string
		want []string
		dir  cobra.ShellCompDirective
	}{
		{[]string{"run", "--modes", ""}, modes, list},
		{[]string{"run", "--modes", modes[0] + ","}, prefixed(modes[0]+",", modes[1:]), list},
		{[]string{"bench", "--modes", ""}, modes, list},
		{[]string{"run", "--scenario", ""}, scenario.Names(), list},
		{[]string{"run", "--corunner", ""}, corunner.Kinds, one},
		{[]string{"run", "--device", ""}, workload.Devices(), one},
		{[]string{"bench", "--device", ""}, workload.Devices(), one},
		{[]string{"run", "--backend", ""}, []string{"local", "libvirt"}, one},
		{[]string{"run", "--domain-type", ""}, []string{"auto", vmimages.TypeKVM, vmimages.TypeQEMU}, one},
		{[]string{"bench", "--contention", ""}, corunner.Contentions, list},
		{[]string{"apps", "--contention", "none,"}, prefixed("none,", corunner.Contentions[1:]), list},
		{[]string{"bench", "--threshold", ""}, workload.Thresholds, list},
		{[]string{"apps", "--arms", ""}, suite.AllArms, list},
		{[]string{"report", "--format", ""}, report.Formats(), one},
		{[]string{"bench", "--log-level", ""}, logLevels, one},
		{[]string{"bench", "--profile", ""}, []string{"mixed"}, file},
		{[]string{"report", ""}, []string{"json"}, ext},
		{[]string{"report", "--stats", ""}, []string{"json"}, ext},
		{[]string{"report", "--nvml", ""}, []string{"json"}, ext},
		{[]string{"report", "-o", ""}, nil, file},
		{[]string{"apps", "--suite", ""}, []string{"json"}, ext},
		{[]string{"apps", "--from", ""}, []string{"jsonl"}, ext},
		{[]string{"apps", "--lib", ""}, []string{"so"}, ext},
		{[]string{"apps", "--blocksync", ""}, []string{"so"}, ext},
		{[]string{"advise", "--lib", ""}, []string{"so"}, ext},
		{[]string{"advise", "--blocksync", ""}, []string{"so"}, ext},
		{[]string{"advise", "--launcher", ""}, nil, file},
		{[]string{"advise", "--out", ""}, nil, dirs},
		{[]string{"agent", "--web.config.file", ""}, []string{"yml", "yaml"}, ext},
		{[]string{"agent", "--hints", ""}, nil, dirs},
		{[]string{"agent", "--cgroup", ""}, nil, dirs},
		{[]string{"apps", "--dir", ""}, nil, dirs},
		{[]string{"apps", "--out", ""}, nil, dirs},
		{[]string{"run", "--out", ""}, nil, dirs},
		{[]string{"run", "--vm-image", ""}, nil, dirs},
		{[]string{"bench", "--hints-page", ""}, nil, file},
		{[]string{"guest", "--out", ""}, nil, file},
	} {
		got, dir := suggest(t, tc.args...)
		if len(tc.want) == 0 {
			got = nil // cobra prints one empty line for no suggestions
		}
		if !slices.Equal(got, tc.want) || dir != tc.dir {
			t.Errorf("%q: %q, %v; want %q, %v", tc.args, got, dir, tc.want, tc.dir)
		}
	}
}

// The suggested log levels and --mitigate prefix make values that parse.
func TestCompleteValuesParse(t *testing.T) {
	for _, l := range logLevels {
		if _, err := zerolog.ParseLevel(l); err != nil {
			t.Errorf("--log-level %s: %v", l, err)
		}
	}
	for _, c := range []string{"agent", "apps", "bench", "run"} {
		got, dir := suggest(t, c, "--mitigate", "")
		if len(got) != 1 || dir != list {
			t.Fatalf("%s --mitigate: %q, %v; want one prefix to go on from", c, got, dir)
		}
		if _, err := mitigate.Parse(got[0] + "100us"); err != nil {
			t.Errorf("%s --mitigate %s100us: %v", c, got[0], err)
		}
	}
}

// freeText are the string flags whose values have no fixed set and are
// no path: a new flag outside this list needs a completion.
var freeText = map[string]bool{
	"listen": true, "libvirt-uri": true, "program": true, "only": true, "corunner-cmd": true,
	"workload-cmd": true, "agent": true, "prometheus": true, "range": true, "match": true,
	"device": true, // guest's: a PCI address
	"job":    true, "port": true,
}

// Every string flag of every command completes, unless it is free text.
func TestEveryStringFlagCompletes(t *testing.T) {
	root := newRootCmd()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if !strings.HasPrefix(f.Value.Type(), "string") || freeText[f.Name] {
				return
			}
			if _, ok := c.GetFlagCompletionFunc(f.Name); !ok {
				t.Errorf("%s --%s: no completion of its values", c.CommandPath(), f.Name)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
