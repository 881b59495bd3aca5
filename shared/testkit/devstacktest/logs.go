package devstacktest

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// serviceLogNotable is how many of a log's last WARN and ERROR lines a failed
// test shows beside the log's path.
const serviceLogNotable = 20

// logFiles hands out the log files of this test binary, so that two services
// of one test given the same name get a file each.
var logFiles struct {
	sync.Mutex
	taken map[string]bool
}

// ServiceLog returns the file for the output of a service (or a stack of them)
// that the test starts, to pass as devstack.StartService's out:
// <os.TempDir()>/flashgate-test-logs/<package>-<pid>/<test>/<name>.log.
// Services write thousands of lines a test, which on a failure buried the
// failure in the test output; they go to the file instead. When the test
// fails, the file is kept and the test's log names it, with its last 20 WARN
// and ERROR lines; when it passes, the file is removed (unless
// FLASHGATE_KEEP_TEST_LOGS is set). A failure to make
// the file fails the test.
func ServiceLog(tb testing.TB, name string) *os.File {
	tb.Helper()
	dir := filepath.Join(serviceLogRoot(), fileSafe(tb.Name()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatalf("service log: %v", err)
	}
	path := takeLogPath(dir, fileSafe(name))
	f, err := os.Create(path)
	if err != nil {
		tb.Fatalf("service log: %v", err)
	}
	// Registered before the service starts, so run after it stopped: its
	// last lines are in.
	tb.Cleanup(func() {
		f.Close()
		if !tb.Failed() && os.Getenv("FLASHGATE_KEEP_TEST_LOGS") == "" {
			os.Remove(path)
			os.Remove(dir) // when no other file is left in it
			return
		}
		tb.Logf("%s's log: %s\n%s", name, path, notableLines(path, serviceLogNotable))
	})
	return f
}

// serviceLogRoot is this test binary's directory of service logs.
func serviceLogRoot() string {
	pkg := strings.TrimSuffix(filepath.Base(os.Args[0]), ".test")
	return filepath.Join(os.TempDir(), "flashgate-test-logs", pkg+"-"+strconv.Itoa(os.Getpid()))
}

// removeServiceLogRoot removes this binary's directory of service logs when
// every test passed and left nothing in it.
func removeServiceLogRoot() { os.Remove(serviceLogRoot()) }

// takeLogPath returns dir/name.log, or dir/name-2.log and so on when this
// binary gave out that path already.
func takeLogPath(dir, name string) string {
	logFiles.Lock()
	defer logFiles.Unlock()
	if logFiles.taken == nil {
		logFiles.taken = map[string]bool{}
	}
	path := filepath.Join(dir, name+".log")
	for i := 2; logFiles.taken[path]; i++ {
		path = filepath.Join(dir, fmt.Sprintf("%s-%d.log", name, i))
	}
	logFiles.taken[path] = true
	return path
}

var unsafeInName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// fileSafe makes a test's or a service's name a file name: a subtest's
// "TestA/case 1" becomes "TestA_case_1".
func fileSafe(name string) string { return unsafeInName.ReplaceAllString(name, "_") }

// notableLines returns the last n WARN and ERROR lines of the log at path,
// or says there were none.
func notableLines(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	total := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		total++
		// A stopping service logs every /readyz it answers 503: not news.
		if l := sc.Text(); (strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`)) &&
			!strings.Contains(l, `"msg":"not ready"`) {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return fmt.Sprintf("(%d lines, no WARN or ERROR line)", total)
	}
	head := fmt.Sprintf("its last %d WARN and ERROR lines (of %d lines):", min(n, len(lines)), total)
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return head + "\n" + strings.Join(lines, "\n")
}
