package layers

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// outside are names of documents that live outside the repository, which
// no tracked file may cite: a reader of a clone has none of them. Spelled
// in two parts so that this file does not name them itself.
var outside = []string{"DESIGN" + ".md", "../" + "shared"}

// mdLink is a markdown link's target: what is in (...) after [...].
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestStandsAlone: the repository is read on its own. No tracked file
// names a document outside it, and every relative link in a markdown file
// leads to a file or directory inside the repository.
func TestStandsAlone(t *testing.T) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not a git checkout (git rev-parse: %v): no list of tracked files", err)
	}
	root := strings.TrimSpace(string(top))
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatal(err)
	}
	files := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	if len(files) < 100 {
		t.Fatalf("git ls-files lists %d files: not the whole repository", len(files))
	}
	links := 0
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil || bytes.IndexByte(b, 0) >= 0 {
			continue // removed in the work tree, or binary
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, name := range outside {
				if strings.Contains(strings.ToLower(line), strings.ToLower(name)) {
					t.Errorf("%s:%d names %s, which is not in the repository: %.120s", f, i+1, name, line)
				}
			}
		}
		if !strings.HasSuffix(f, ".md") {
			continue
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			path := filepath.Join(root, filepath.Dir(f), target)
			if rel, err := filepath.Rel(root, path); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
				t.Errorf("%s links to %s, outside the repository", f, m[1])
			} else if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links to %s, which does not exist", f, m[1])
			}
		}
	}
	// The link scan must work: the README links the docs.
	if links == 0 {
		t.Error("no relative markdown link found: the scan misses them")
	}
}
