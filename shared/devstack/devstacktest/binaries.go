package devstacktest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

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
