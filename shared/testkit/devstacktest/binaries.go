package devstacktest

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// PrebuiltEnv names a directory that already holds the project's commands,
// built from this tree: `make test` builds ledger, proxy, loadtest and
// flashgatectl there once, instead of once per test package. Binaries uses
// it when it holds every command asked for, and builds them itself otherwise.
const PrebuiltEnv = "FLASHGATE_TEST_BIN"

// built holds the binaries built for this test binary, by package list.
var built struct {
	sync.Mutex
	dirs map[string]*buildResult
}

type buildResult struct {
	once sync.Once
	dir  string
	err  error
	out  []byte
}

// Binaries builds the project's own commands (package paths relative to the
// test's directory, e.g. "../ledger", "../proxy") once per test binary into a
// temp dir and returns it; each binary is named after its package's directory.
// RunTests removes the dir. Tests use it to run, kill and restart real
// processes.
func Binaries(tb testing.TB, pkgs ...string) string {
	tb.Helper()
	dir, err := buildBinaries(pkgs...)
	if err != nil {
		tb.Fatal(err)
	}
	return dir
}

// buildBinaries is Binaries for a caller without a testing.TB (TestMain).
func buildBinaries(pkgs ...string) (string, error) {
	if dir := prebuilt(pkgs); dir != "" {
		return dir, nil
	}
	key := strings.Join(pkgs, " ")
	built.Lock()
	if built.dirs == nil {
		built.dirs = map[string]*buildResult{}
	}
	b := built.dirs[key]
	if b == nil {
		b = &buildResult{}
		built.dirs[key] = b
	}
	built.Unlock()
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "flashgate-bin-"); b.err != nil {
			return
		}
		args := append([]string{"build", "-o", b.dir + string(os.PathSeparator)}, pkgs...)
		b.out, b.err = exec.Command("go", args...).CombinedOutput()
	})
	if b.err != nil {
		return "", fmt.Errorf("devstack: go build %s: %v\n%s", key, b.err, b.out)
	}
	return b.dir, nil
}

// removeBinaries deletes what Binaries built.
func removeBinaries() {
	built.Lock()
	defer built.Unlock()
	for _, b := range built.dirs {
		if b.dir != "" {
			os.RemoveAll(b.dir)
		}
	}
}

// prebuilt returns PrebuiltEnv's directory when it holds a command for each
// of pkgs (a package's command is named after its directory), else "".
func prebuilt(pkgs []string) string {
	dir := os.Getenv(PrebuiltEnv)
	if dir == "" {
		return ""
	}
	for _, pkg := range pkgs {
		name := path.Base(pkg)
		if !strings.Contains(pkg, "/") || strings.HasPrefix(pkg, ".") {
			abs, err := filepath.Abs(pkg)
			if err != nil {
				return ""
			}
			name = filepath.Base(abs)
		}
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || !fi.Mode().IsRegular() {
			return ""
		}
	}
	return dir
}
