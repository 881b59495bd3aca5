package devstacktest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeTB is a test whose failure, cleanups and log the test sees.
type fakeTB struct {
	testing.TB
	name     string
	failed   bool
	cleanups []func()
	logs     []string
}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Name() string      { return f.name }
func (f *fakeTB) Failed() bool      { return f.failed }
func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Logf(format string, args ...any) {
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}

func (f *fakeTB) end() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

// A service's output goes to a file, not the test's output: removed when the
// test passes; kept and named, with its last WARN and ERROR lines, when it
// fails.
func TestServiceLog(t *testing.T) {
	write := func(f *os.File) {
		for i := range 30 {
			fmt.Fprintf(f, "[proxy] {\"level\":\"INFO\",\"msg\":\"fine %d\"}\n", i)
			fmt.Fprintf(f, "[proxy] {\"level\":\"WARN\",\"msg\":\"warned %d\"}\n", i)
		}
		fmt.Fprintln(f, `[proxy] {"level":"ERROR","msg":"request failed","err":"the cause"}`)
	}

	passed := &fakeTB{TB: t, name: t.Name() + "/passes"}
	f := ServiceLog(passed, "proxy")
	write(f)
	passed.end()
	_, err := os.Stat(f.Name())
	require.True(t, os.IsNotExist(err), "a passing test's log is removed: %v", err)
	require.Empty(t, passed.logs)

	failed := &fakeTB{TB: t, name: t.Name() + "/fails"}
	f = ServiceLog(failed, "proxy")
	again := ServiceLog(failed, "proxy")
	require.NotEqual(t, f.Name(), again.Name(), "two services of one name get a file each")
	require.Contains(t, f.Name(), "flashgate-test-logs")
	write(f)
	failed.failed = true
	failed.end()
	t.Cleanup(func() { os.Remove(f.Name()); os.Remove(again.Name()); os.Remove(filepath.Dir(f.Name())) })
	require.FileExists(t, f.Name(), "a failed test's log is kept")
	require.Len(t, failed.logs, 2)
	msg := failed.logs[1] // the first service's, cleaned up last
	require.Contains(t, msg, f.Name(), "the failure names the file")
	require.Contains(t, msg, "the cause")
	require.Contains(t, msg, "warned 29")
	require.NotContains(t, msg, "warned 10", "only the last 20 WARN and ERROR lines")
	require.NotContains(t, msg, "fine", "no INFO line")
	require.Equal(t, 21, strings.Count(msg, "\n"), "a header and 20 lines:\n%s", msg)
	require.Contains(t, failed.logs[0], "no WARN or ERROR line")
}
