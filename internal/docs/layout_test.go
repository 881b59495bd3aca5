package docs

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// layoutPage and layoutHead name the section that lists every package.
const (
	layoutPage = "CONTRIBUTING.md"
	layoutHead = "## Layout"
)

// TestLayoutListsEveryPackage: every directory of the module with Go files
// (what `go list ./...` lists) appears in CONTRIBUTING.md's layout as its path
// from the root with a trailing slash, and every directory or Go file the
// layout names exists.
func TestLayoutListsEveryPackage(t *testing.T) {
	layout := strings.Join(section(t, read(t, layoutPage), layoutPage, layoutHead), "\n")
	cmd := exec.Command("go", "list", "-f", "{{.Dir}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	require.NoError(t, err, "go list ./...")
	abs, err := filepath.Abs(root)
	require.NoError(t, err)
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(abs, dir)
		require.NoError(t, err)
		if rel == "." {
			continue
		}
		if !regexp.MustCompile(`(^|[\s(` + "`" + `])` + regexp.QuoteMeta(filepath.ToSlash(rel)+"/")).MatchString(layout) {
			t.Errorf("%s's %q does not list %s/", layoutPage, layoutHead, filepath.ToSlash(rel))
		}
	}

	for _, m := range regexp.MustCompile(`(?m)^\s*([a-z][\w./-]*/)\s`).FindAllStringSubmatch(layout, -1) {
		if !isDir(filepath.Join(root, m[1])) {
			t.Errorf("%s's %q lists %s, which does not exist", layoutPage, layoutHead, m[1])
		}
	}
	files := goFiles(t)
	for _, m := range regexp.MustCompile(`\b[\w]+\.go\b`).FindAllString(layout, -1) {
		if !files[m] {
			t.Errorf("%s's %q names %s, which no directory holds", layoutPage, layoutHead, m)
		}
	}
}

// goFiles is the base name of every Go file of the module.
func goFiles(t *testing.T) map[string]bool {
	t.Helper()
	files := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(d.Name(), ".go") {
			files[d.Name()] = true
		}
		return nil
	})
	require.NoError(t, err)
	return files
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}
