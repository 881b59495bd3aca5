package docs

import (
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// link is a Markdown link to a page of the repository: [text](target#anchor).
var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestLinksResolve: every relative link of the pages names a file that exists
// and, with an anchor, a heading of that file (GitHub's anchors: the heading
// in lower case, spaces as dashes, punctuation dropped).
func TestLinksResolve(t *testing.T) {
	for _, rel := range pages(t) {
		for _, m := range link.FindAllStringSubmatch(read(t, rel), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := rel
			if file != "" {
				dest = path.Clean(path.Join(path.Dir(rel), file))
			}
			if _, err := os.Stat(root + "/" + dest); err != nil {
				t.Errorf("%s links to %s, which does not exist", rel, target)
				continue
			}
			if anchor != "" && strings.HasSuffix(dest, ".md") && !anchors(read(t, dest))[anchor] {
				t.Errorf("%s links to %s: %s has no heading with that anchor", rel, target, dest)
			}
		}
	}
}

// notInAnchor is what GitHub drops from a heading to make its anchor.
var notInAnchor = regexp.MustCompile(`[^\p{L}\p{N} _-]`)

// anchors returns the anchors of page's headings (outside code blocks).
func anchors(page string) map[string]bool {
	out := map[string]bool{}
	fence := false
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		head := strings.TrimSpace(strings.TrimLeft(line, "#"))
		a := strings.ReplaceAll(notInAnchor.ReplaceAllString(strings.ToLower(head), ""), " ", "-")
		base := a
		for n := 1; out[a]; n++ { // a repeated heading gets -1, -2, ...
			a = base + "-" + strconv.Itoa(n)
		}
		out[a] = true
	}
	return out
}
