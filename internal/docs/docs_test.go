package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

func TestMain(m *testing.M) { os.Exit(devstacktest.RunTests(m)) }

// root is the module's root, from this package's directory.
const root = "../.."

// pages are the documents these tests hold to the rules: what a reader of the
// repository reads, from the module's root.
func pages(t *testing.T) []string {
	t.Helper()
	out := []string{"README.md", "CONTRIBUTING.md", "loadtest/BENCHMARKS.md", "loadtest/RELIABILITY.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, docs, "docs/ has no pages")
	for _, d := range docs {
		out = append(out, filepath.ToSlash(strings.TrimPrefix(d, root+string(filepath.Separator))))
	}
	return out
}

// read returns the page at rel, a path from the module's root.
func read(t *testing.T, rel string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	require.NoError(t, err)
	return string(raw)
}

// section returns the lines under the heading line head in page, up to the
// next heading of the same or a higher level (a "# " line inside a code block
// is a comment, not a heading).
func section(t *testing.T, page, rel, head string) []string {
	t.Helper()
	level := strings.Index(head, " ")
	var out []string
	in, fence := false, false
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if !fence && strings.HasPrefix(line, "#") {
			n := len(line) - len(strings.TrimLeft(line, "#"))
			if in && n <= level && strings.HasPrefix(line[n:], " ") {
				return out
			}
			if line == head {
				in = true
				continue
			}
		}
		if in {
			out = append(out, line)
		}
	}
	require.True(t, in, "%s has no %q", rel, head)
	return out
}

// issueRef and runDate are what history looks like in a page: an issue's
// number, or a date that is not part of a timestamp in an example.
var (
	issueRef = regexp.MustCompile(`(?i)\bissues? #?\d+`)
	runDate  = regexp.MustCompile(`\b20\d\d-\d\d-\d\d([^T\d]|$)`)
)

// TestNoHistory: the pages say what is, not how it came to be: no issue
// numbers, no dated runs (history lives in git).
func TestNoHistory(t *testing.T) {
	for _, rel := range pages(t) {
		for i, line := range strings.Split(read(t, rel), "\n") {
			if m := issueRef.FindString(line); m != "" {
				t.Errorf("%s:%d names %q: say what is, not which issue did it", rel, i+1, m)
			}
			if m := runDate.FindString(line); m != "" {
				t.Errorf("%s:%d has the date %q: dated runs live in git history", rel, i+1, strings.TrimSpace(m))
			}
		}
	}
}

// maxLine is the longest line a page may have, but a table row or a URL.
const maxLine = 110

// TestLineLength: prose and code stay readable in a terminal; a table row
// (one line per row in Markdown) and a line holding a URL may run longer.
func TestLineLength(t *testing.T) {
	for _, rel := range pages(t) {
		for i, line := range strings.Split(read(t, rel), "\n") {
			if len([]rune(line)) <= maxLine || strings.HasPrefix(strings.TrimSpace(line), "|") ||
				strings.Contains(line, "://") {
				continue
			}
			t.Errorf("%s:%d is %d characters long (at most %d but tables and URLs)", rel, i+1, len([]rune(line)), maxLine)
		}
	}
}

// TestReadmeShort: the README is the front door, at most 300 lines.
func TestReadmeShort(t *testing.T) {
	readme := read(t, "README.md")
	if n := strings.Count(readme, "\n"); n > 300 {
		t.Errorf("README.md has %d lines, want at most 300: move the rest to docs/", n)
	}
	for _, head := range []string{"## Five-minute walk-through", "## Where to go next"} {
		require.Contains(t, readme, "\n"+head+"\n")
	}
}
