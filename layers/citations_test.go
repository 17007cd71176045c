package layers

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// A citation names a markdown document and, after it, what in it is meant:
//
//	docs/tried.md: "Stale event records"
//	docs/BENCHMARKS.md, "What the library's parts cost": "Launch observers, in one process"
//	[tried.md](tried.md): **Every wait through the Go policy**
//	"Agent and library together" in docs/BENCHMARKS.md
//	[The contention signal](BENCHMARKS.md#the-contention-signal)
//
// A quoted or bolded name must be a heading of the document or the bold
// lead of one of its paragraphs or list items, whole or shortened to what
// comes before its punctuation ("Table II in real VMs" for "Table II in
// real VMs: `run --backend libvirt`"); a second name after a colon must be
// one inside the first's section. An anchor must be the GitHub anchor of
// one of its headings. Comments wrap, so a citation is read across lines
// with their comment leaders (//, #, *) removed.

// docPath is a markdown document's path as written, and the anchor after it.
var docPath = regexp.MustCompile(`([A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md)(#[^\s)\]"'` + "`" + `,;]*)?`)

// nameAfter is what follows a document's path when it names a part of it:
// the link's closing parenthesis, a comma or colon, then a quoted or
// bolded name, and perhaps ": " and a second quoted name.
var nameAfter = regexp.MustCompile(`^\)?[,:]?\s+(?:"([^"]{1,200})"|\*\*([^*]{1,200})\*\*)(?::\s+"([^"]{1,200})")?`)

// nameBefore is a quoted or bolded name followed by " in " and the
// document (or the opening of a link to it) whose path ends the text.
var nameBefore = regexp.MustCompile(`(?:"([^"]{1,200})"|\*\*([^*]{1,200})\*\*) in (?:\[[^\]]*\]\()?$`)

// citation is one reference found in a file.
type citation struct {
	line   int    // where it starts in the citing file (1-based)
	doc    string // the path as written
	anchor string // after '#', if any
	name   string // the quoted or bolded name, if any
	sub    string // a second name, inside name's section
}

// flatten joins a file's lines into one text, each line's indentation and
// comment leader (//, #, or a * that does not start **bold**) replaced by
// a space, and returns the text with the offset where each line starts.
func flatten(src string) (string, []int) {
	var b strings.Builder
	var starts []int
	for i, line := range strings.Split(src, "\n") {
		if i > 0 {
			b.WriteByte(' ')
		}
		l := strings.TrimLeft(line, " \t")
		switch {
		case strings.HasPrefix(l, "//"):
			l = strings.TrimLeft(l, "/")
		case strings.HasPrefix(l, "#"):
			l = strings.TrimLeft(l, "#")
		case strings.HasPrefix(l, "*") && !strings.HasPrefix(l, "**") && !strings.HasPrefix(l, "*/"):
			l = l[1:]
		}
		starts = append(starts, b.Len())
		b.WriteString(strings.TrimLeft(l, " \t"))
	}
	return b.String(), starts
}

// lineAt is the 1-based line of offset off in a flattened text.
func lineAt(starts []int, off int) int {
	n := 0
	for n < len(starts) && starts[n] <= off {
		n++
	}
	return n
}

// findCitations lists the citations of markdown documents in src.
func findCitations(src string) []citation {
	text, starts := flatten(src)
	var out []citation
	for _, m := range docPath.FindAllStringSubmatchIndex(text, -1) {
		// Part of a longer name (an URL's host, "x.mdx") is not a path.
		if m[0] > 0 && strings.ContainsRune(":@", rune(text[m[0]-1])) {
			continue
		}
		if m[1] < len(text) && (unicode.IsLetter(rune(text[m[1]])) || unicode.IsDigit(rune(text[m[1]]))) {
			continue
		}
		c := citation{line: lineAt(starts, m[0]), doc: text[m[2]:m[3]]}
		if strings.Contains(text[max(0, m[0]-8):m[0]], "://") {
			continue // a web address
		}
		if m[4] >= 0 {
			c.anchor = text[m[4]+1 : m[5]]
		}
		if n := nameAfter.FindStringSubmatch(text[m[1]:]); n != nil {
			c.name, c.sub = n[1]+n[2], n[3]
		} else if n := nameBefore.FindStringSubmatch(text[max(0, m[0]-300):m[0]]); n != nil {
			c.name = n[1] + n[2]
		}
		out = append(out, c)
	}
	// Links within a markdown document: [text](#anchor).
	for _, m := range regexp.MustCompile(`\]\(#([^)\s]+)\)`).FindAllStringSubmatchIndex(text, -1) {
		out = append(out, citation{line: lineAt(starts, m[0]), anchor: text[m[2]:m[3]]})
	}
	return out
}

// section is a heading or a bold lead, and where its section ends.
type section struct {
	name  string // normalized
	level int    // heading level; 7 for a bold lead
	start int    // its line index
	end   int    // the index of the next heading of its level or above
}

// outline is what a markdown document offers to cite.
type outline struct {
	parts   []section
	anchors map[string]bool
}

var (
	heading  = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	boldLead = regexp.MustCompile(`^\s*(?:[-*+]\s+|\d+\.\s+)?\*\*(.+?)\*\*`)
)

// parseOutline reads a document's headings (outside code blocks) and the
// bold leads of its paragraphs and list items.
func parseOutline(doc string) outline {
	o := outline{anchors: map[string]bool{}}
	seen := map[string]int{}
	lines := strings.Split(doc, "\n")
	fence := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		if h := heading.FindStringSubmatch(l); h != nil {
			o.parts = append(o.parts, section{name: normalize(h[2]), level: len(h[1]), start: i})
			a := githubAnchor(h[2])
			if k := seen[a]; k > 0 {
				o.anchors[fmt.Sprintf("%s-%d", a, k)] = true
			} else {
				o.anchors[a] = true
			}
			seen[a]++
		} else if b := boldLead.FindStringSubmatch(l); b != nil {
			o.parts = append(o.parts, section{name: normalize(b[1]), level: 7, start: i})
		}
	}
	for i := range o.parts {
		o.parts[i].end = len(lines)
		for _, p := range o.parts[i+1:] {
			if p.level <= o.parts[i].level {
				o.parts[i].end = p.start
				break
			}
		}
	}
	return o
}

// normalize drops a name's markup, case and final punctuation.
func normalize(s string) string {
	s = strings.NewReplacer("`", "", "**", "").Replace(s)
	s = strings.Join(strings.Fields(s), " ")
	return strings.ToLower(strings.TrimRight(s, ".:, "))
}

// githubAnchor is the anchor GitHub gives a heading: its text in lower
// case, without markup and punctuation (letters, digits, '-' and '_'
// stay), spaces as '-'.
func githubAnchor(h string) string {
	h = strings.NewReplacer("`", "", "**", "").Replace(h)
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// names says whether cited is the part's name, whole or cut before its
// punctuation.
func names(part, cited string) bool {
	cited = normalize(cited)
	if part == cited {
		return true
	}
	rest, ok := strings.CutPrefix(part, cited)
	rest = strings.TrimLeft(rest, " ")
	return ok && rest != "" && strings.ContainsRune(":(,;.—-", []rune(rest)[0])
}

// find returns the part of o that name names, searching parts whose lines
// lie in [from, to).
func (o outline) find(name string, from, to int) (section, bool) {
	for _, p := range o.parts {
		if p.start >= from && p.start < to && names(p.name, name) {
			return p, true
		}
	}
	return section{}, false
}

// check returns what is wrong with c, cited in a file whose document, if
// it is one, is self; docs resolves a path to a document's text.
func (c citation) check(self *outline, docs func(string) (string, bool)) string {
	o := self
	if c.doc != "" {
		text, ok := docs(c.doc)
		if !ok {
			return fmt.Sprintf("cites %s, which does not exist", c.doc)
		}
		out := parseOutline(text)
		o = &out
	}
	if o == nil {
		return ""
	}
	if c.anchor != "" && !o.anchors[c.anchor] {
		return fmt.Sprintf("links to %s#%s: no heading has that anchor", c.doc, c.anchor)
	}
	if c.name == "" {
		return ""
	}
	p, ok := o.find(c.name, 0, 1<<30)
	if !ok {
		return fmt.Sprintf("cites %s, %q: no heading or bold item of that name", c.doc, c.name)
	}
	if c.sub != "" {
		if _, ok := o.find(c.sub, p.start+1, p.end); !ok {
			return fmt.Sprintf("cites %s, %q: %q: no heading or bold item of that name in that section", c.doc, c.name, c.sub)
		}
	}
	return ""
}

// TestCitations: every citation of a document in the repository's text
// files names a document that exists and a part of it that does.
func TestCitations(t *testing.T) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not a git checkout (git rev-parse: %v): no list of files", err)
	}
	root := strings.TrimSpace(string(top))
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatal(err)
	}
	read := func(path string) (string, bool) {
		b, err := os.ReadFile(path)
		return string(b), err == nil
	}
	cited, named := 0, 0
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil || bytes.IndexByte(b, 0) >= 0 {
			continue // removed in the work tree, or binary
		}
		var self *outline
		if strings.HasSuffix(f, ".md") {
			o := parseOutline(string(b))
			self = &o
		}
		// A path is read from the citing file's directory, from the
		// repository's top, or, bare, from docs/.
		docs := func(p string) (string, bool) {
			for _, dir := range []string{filepath.Dir(f), ".", "docs"} {
				if s, ok := read(filepath.Join(root, dir, p)); ok {
					return s, true
				}
			}
			return "", false
		}
		for _, c := range findCitations(string(b)) {
			cited++
			if c.name != "" {
				named++
			}
			if msg := c.check(self, docs); msg != "" {
				t.Errorf("%s:%d %s", f, c.line, msg)
			}
		}
	}
	// The scan must work: the code cites docs/tried.md by item.
	if cited < 100 || named < 40 {
		t.Errorf("found %d citations, %d of them naming a part: the scan misses them", cited, named)
	}
}

const md = ".md"

// TestCitationMatcher: the matcher reads the forms the repository uses and
// fails on a name, a second name, an anchor or a document that is not there.
func TestCitationMatcher(t *testing.T) {
	doc := "# Title\n\n## The contention signal\n\ntext\n\n" +
		"### What it costs\n\n**Launch observers, in one process.** text\n\n" +
		"## Table II in real VMs: `run --backend libvirt`\n\n" +
		"- **Every wait through the Go policy**: text\n\n```\n# not a heading\n```\n"
	docs := func(p string) (string, bool) { return doc, filepath.Base(p) == "X"+md }
	// The cases spell the documents' suffix .mq, made .md when they run,
	// so that the scan of this file does not read them as citations.
	cases := []struct {
		src  string
		want string // "" for a good citation, else a part of the complaint
	}{
		{"// (docs/X.mq: \"Every wait through\n// the Go policy\").", ""},
		{"/* docs/X.mq, \"What it costs\":\n * \"Launch observers, in one process\" */", ""},
		{"# see docs/X.mq, \"Table II in real VMs\"", ""},
		{"[x](X.mq#table-ii-in-real-vms-run---backend-libvirt)", ""},
		{"[X.mq](X.mq): **The contention signal**", ""},
		{"\"The contention signal\" in docs/X.mq", ""},
		{"docs/X.mq#the-contention-signal and docs/X.mq", ""},
		{"// docs/X.mq: \"Stale event records\"", "no heading or bold item"},
		{"// docs/X.mq, \"The contention\"", "no heading or bold item"},
		{"// docs/X.mq, \"Not a heading\"", "no heading or bold item"},
		{"// docs/X.mq, \"Table II in real VMs\": \"Launch observers\"", "in that section"},
		{"[x](X.mq#the-contention)", "no heading has that anchor"},
		{"// docs/Y.mq, \"The contention signal\"", "does not exist"},
		{"\"Stale event records\" in docs/X.mq", "no heading or bold item"},
	}
	for _, c := range cases {
		found := findCitations(strings.ReplaceAll(c.src, ".mq", md))
		if len(found) == 0 {
			t.Errorf("%q: no citation found", c.src)
			continue
		}
		var msgs []string
		for _, f := range found {
			if m := f.check(nil, docs); m != "" {
				msgs = append(msgs, m)
			}
		}
		got := strings.Join(msgs, "; ")
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%q: got %q, want %q", c.src, got, c.want)
		}
	}
	self := parseOutline(doc)
	if m := (citation{anchor: "nope"}).check(&self, docs); m == "" {
		t.Error("a link to a missing anchor of the same document passed")
	}
	if githubAnchor("Several OpenMP threads: GROMACS -ntomp 4") != "several-openmp-threads-gromacs--ntomp-4" {
		t.Error("githubAnchor differs from GitHub's rule")
	}
}
