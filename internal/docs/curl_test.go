package docs

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

// curlPage and curlSections name the sections whose ```sh blocks
// TestOperationsCurl runs, in the page's order, as one shell session.
const curlPage = "docs/operations.md"

var curlSections = []string{
	"## A sale day over HTTP",
	"## Before the sale: preload the flash vouchers",
	"## After the sale",
}

// fgSpy replaces the page's fg (which prints an answer's body, then its
// status) once the page has defined it: each call prints one line the test
// reads, "@@fg <status> <what the page's fg printed>".
const fgSpy = `eval "doc_$(declare -f fg)"
fg() { local out; out=$(doc_fg "$@"); echo "@@fg ${out##* } $out"; }
`

// TestOperationsCurl runs the curl snippets of the operator's page against a
// stack of its own, with FLASHGATE_PROXY, FLASHGATE_LEDGER and FLASHGATE_TOKEN
// set as bin/run.env sets them: every command must succeed, and every fg call
// must answer the status its comment shows.
func TestOperationsCurl(t *testing.T) {
	const token = "docs-secret"
	stack, err := devstacktest.StartFlashgate(devstacktest.FlashgateOptions{LedgerToken: token})
	require.NoError(t, err)
	t.Cleanup(func() { _ = stack.Stop() })

	page := read(t, curlPage)
	var script strings.Builder
	script.WriteString("set -e -o pipefail\n")
	var want []string
	for _, head := range curlSections {
		for _, block := range shBlocks(section(t, page, curlPage, head)) {
			script.WriteString(block)
			if strings.Contains(block, "fg() {") {
				script.WriteString(fgSpy)
			}
			want = append(want, fgStatuses(block)...)
		}
	}
	require.NotEmpty(t, want, "%s has no fg calls", curlPage)

	cmd := exec.CommandContext(t.Context(), "bash", "-c", script.String())
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "FLASHGATE_PROXY="+stack.ProxyURL,
		"FLASHGATE_LEDGER="+stack.LedgerURL, "FLASHGATE_TOKEN="+token)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the snippets of %s fail:\n%s", curlPage, out)

	var got []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "@@fg ") {
			got = append(got, line)
		}
	}
	t.Logf("want %q\n%s", want, strings.Join(got, "\n"))
	require.Len(t, got, len(want), "fg calls run, against those of %s:\n%s", curlPage, out)
	for i, line := range got {
		status := strings.Fields(line)[1]
		assert.NotEmpty(t, want[i], "fg call %d of %s shows no status in its comment", i+1, curlPage)
		assert.Equal(t, want[i], status, "fg call %d of %s: %s", i+1, curlPage, line)
	}
}

// shBlocks returns the ```sh blocks of lines, each with its trailing newline.
func shBlocks(lines []string) []string {
	var blocks []string
	var b strings.Builder
	in := false
	for _, line := range lines {
		switch {
		case !in && line == "```sh":
			in = true
		case in && line == "```":
			blocks = append(blocks, b.String())
			b.Reset()
			in = false
		case in:
			b.WriteString(line + "\n")
		}
	}
	return blocks
}

// statusAfterBody is the status a comment gives: the first of 2xx-5xx after
// its last '}' (a body), or in the whole comment when it shows no body.
var statusAfterBody = regexp.MustCompile(`\b[2-5]\d\d\b`)

// fgStatuses returns, for each fg call of block in order, the status its
// comment gives: a comment at the end of the command's last line, or the
// comment lines right after the command; "" when neither gives one.
func fgStatuses(block string) []string {
	var out []string
	open := -1    // the fg call whose comment may still come
	quotes := 0   // single quotes of the command so far: odd inside a string
	cont := false // the command goes on on the next line
	for _, line := range strings.Split(block, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "#"):
			if open >= 0 && out[open] == "" {
				out[open] = commentStatus(trimmed)
			}
			continue
		case trimmed == "":
			continue
		case !cont && quotes%2 == 0: // a new command
			quotes, open = 0, -1
			if strings.HasPrefix(trimmed, "fg ") {
				out = append(out, "")
				open = len(out) - 1
			}
		}
		code, comment, _ := strings.Cut(line, "   #")
		quotes += strings.Count(code, "'")
		cont = strings.HasSuffix(strings.TrimSpace(code), `\`)
		if open >= 0 && comment != "" && out[open] == "" {
			out[open] = commentStatus(comment)
		}
	}
	return out
}

// commentStatus is the status a comment gives, or "".
func commentStatus(comment string) string {
	if at := strings.LastIndex(comment, "}"); at >= 0 {
		comment = comment[at:]
	}
	return statusAfterBody.FindString(comment)
}
