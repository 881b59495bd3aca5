package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The walk-through's snippets, as README.md writes them:
//
//   - The section lies between walkStart and walkEnd; its ```sh blocks run in
//     order, in one bash, and other fences are only read.
//   - A command is the fewest lines, from a line that is not a comment, that
//     bash can parse (continuation lines and quoted strings over several
//     lines included).
//   - A `# ` line right under a command (or under another such line) is one
//     line of what the command prints, stdout and stderr together as a
//     terminal shows them; a line `# ...` stands for any number of lines, and
//     `...` within a line for any text. A command shown with no such lines is
//     only run. A comment after a blank line, or at a block's start, is prose.
const (
	walkStart = "<!-- walkthrough:start -->"
	walkEnd   = "<!-- walkthrough:end -->"
	anyText   = "..."
)

// snippet is one command of the walk-through and what it must print.
type snippet struct {
	block int      // the ```sh block it is in, from 0
	line  int      // its first line in README.md, from 1
	text  string   // the command as written
	shown []string // the lines under it, "# " cut off
}

// walkthroughSnippets reads the commands of the README's walk-through.
func walkthroughSnippets(t *testing.T, readme string) []*snippet {
	t.Helper()
	f, err := os.Open(readme)
	require.NoError(t, err)
	defer f.Close()
	var (
		snippets          []*snippet
		inSection, inSh   bool
		inFence, finished bool
		block             = -1
		pending, last     *snippet
	)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case !inSection:
			inSection = line == walkStart
		case !inFence && line == walkEnd:
			finished = true
		case !inFence:
			inFence = strings.HasPrefix(line, "```")
			if inSh = line == "```sh"; inSh {
				block++
			}
			pending, last = nil, nil
		case line == "```":
			require.Nil(t, pending, "README.md:%d: the block ends inside a command", n)
			inFence, inSh = false, false
		case !inSh:
		case pending != nil:
			pending.text += "\n" + line
		case strings.TrimSpace(line) == "":
			last = nil
		case strings.HasPrefix(line, "#"):
			if last != nil {
				shown, _ := strings.CutPrefix(strings.TrimPrefix(line, "#"), " ")
				last.shown = append(last.shown, shown)
			}
		default:
			pending = &snippet{block: block, line: n, text: line}
		}
		if pending != nil && complete(t, pending.text) {
			snippets, last, pending = append(snippets, pending), pending, nil
		}
		if finished {
			break
		}
	}
	require.NoError(t, sc.Err())
	require.True(t, finished, "README.md has no %s ... %s section", walkStart, walkEnd)
	return snippets
}

// complete says whether bash can parse text as it stands: a line ending in
// a backslash, an open quote or an open $( ) continues on the next line.
func complete(t *testing.T, text string) bool {
	t.Helper()
	if strings.HasSuffix(text, `\`) {
		return false
	}
	out, err := exec.Command("bash", "-n", "-c", text).CombinedOutput()
	if err != nil {
		require.Regexp(t, `unexpected (EOF|end of file)`, string(out), "bash -n: %s", text)
	}
	return err == nil
}

// matches says whether got, a command's output, is what shown says it prints.
func matches(shown []string, got string) bool {
	got = strings.TrimRight(strings.ReplaceAll(got, "\r\n", "\n"), "\n")
	lines := strings.Split(got, "\n")
	if got == "" {
		lines = nil
	}
	return matchLines(shown, lines)
}

// matchLines matches lines against patterns, a pattern of "..." taking any
// number of them.
func matchLines(patterns, lines []string) bool {
	if len(patterns) == 0 {
		return len(lines) == 0
	}
	if patterns[0] == anyText {
		for skip := 0; skip <= len(lines); skip++ {
			if matchLines(patterns[1:], lines[skip:]) {
				return true
			}
		}
		return false
	}
	return len(lines) > 0 && linePattern(patterns[0]).MatchString(lines[0]) && matchLines(patterns[1:], lines[1:])
}

// linePattern is a shown line as a regular expression: "..." matches any text.
func linePattern(shown string) *regexp.Regexp {
	parts := strings.Split(shown, anyText)
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
}

// describe is s for a failure message: where it is and what it shows.
func (s *snippet) describe() string {
	return fmt.Sprintf("README.md:%d:\n%s\nshown:\n%s", s.line, s.text, strings.Join(s.shown, "\n"))
}

// TestMatches: the README's way of showing output, line by line, "..." for
// any text in a line and for any number of lines.
func TestMatches(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		shown []string
		got   string
		want  bool
	}{
		{[]string{"201"}, "201\n", true},
		{[]string{"201"}, "200\n", false},
		{[]string{"201"}, "201\n201\n", false},
		{[]string{`{"a":1,...,"c":3}`, "201"}, "{\"a\":1,\"b\":2,\"c\":3}\n201", true},
		{[]string{`{"a":1,...,"c":3}`}, `{"a":1,"c":4}`, false},
		{[]string{"a.c"}, "abc", false}, // a shown character is itself, not a pattern
		{[]string{"HTTP/1.1 201 Created", anyText, "X: y", anyText}, "HTTP/1.1 201 Created\r\nA: b\r\nX: y\r\n\r\n{}", true},
		{[]string{"HTTP/1.1 201 Created", anyText, "X: y", anyText}, "HTTP/1.1 201 Created\r\nA: b\r\n\r\n{}", false},
		{[]string{anyText}, "", true},
		{[]string{"a", "", "b"}, "a\n\nb", true},
		{[]string{"a", "b"}, "a\n\nb", false}, // an empty line printed is a line to show
		{nil, "", true},
	} {
		if got := matches(c.shown, c.got); got != c.want {
			t.Errorf("matches(%q, %q) = %v, want %v", c.shown, c.got, got, c.want)
		}
	}
}
