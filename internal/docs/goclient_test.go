package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// shopMain wraps docs/api.md's Go client example in a program of another
// module: the example's free names (ctx, checkoutID) are the function's
// parameters, and the answer it reads only in comments (r) is used once.
const shopMain = `package main

import (
	"context"
	"os"
	"time"

	"github.com/flashgate/flashgate/shared/client"
	"github.com/flashgate/flashgate/shared/voucher"
)

var (
	_ = os.Getenv
	_ = time.Second
	_ = client.New
	_ = voucher.ErrorCode
)

func reserve(ctx context.Context, checkoutID string) {
%s
	_ = r
}

func main() { reserve(context.Background(), "checkout-1") }
`

// TestGoClientFromAnotherModule builds docs/api.md's Go client example as a
// module of its own that requires this one (replaced by the checkout, with
// this module's go.sum, offline), as the page tells a shop to use it.
func TestGoClientFromAnotherModule(t *testing.T) {
	example := goBlock(t, section(t, read(t, "docs/api.md"), "docs/api.md", "## Go client"))
	abs, err := filepath.Abs(root)
	require.NoError(t, err)
	dir := t.TempDir()
	mod := "module example.com/shop\n\ngo 1.26.0\n\nrequire github.com/flashgate/flashgate v0.0.0\n\n" +
		"replace github.com/flashgate/flashgate => " + abs + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644))
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
	src := strings.Replace(shopMain, "%s", example, 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644))

	cmd := exec.Command("go", "build", "-o", os.DevNull, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the Go client example of docs/api.md does not build from another module:\n%s\n%s", out, src)
}

// goBlock is the first ```go block of lines.
func goBlock(t *testing.T, lines []string) string {
	t.Helper()
	var block []string
	in := false
	for _, line := range lines {
		switch {
		case !in && line == "```go":
			in = true
		case in && line == "```":
			return strings.Join(block, "\n")
		case in:
			block = append(block, "\t"+line)
		}
	}
	t.Fatal("no ```go block")
	return ""
}
