package httpxtest

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/shared/envconf"
)

// CheckCommandLine runs the service's binary with --help and --version: both
// exit 0 without any setting in the environment, help names every setting
// config reads (and LOG_LEVEL and GOGC), and version names the service.
func CheckCommandLine[C any](tb testing.TB, binary, service string, config func(*envconf.Reader) (C, error)) {
	tb.Helper()
	r := envconf.NewFrom(nil)
	envconf.Shared(r)
	_, _ = config(r)
	for _, arg := range []string{"--help", "-h", "--version"} {
		cmd := exec.Command(binary, arg)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")} // no REDIS_URL, DATABASE_URL: help needs none
		out, err := cmd.Output()
		if err != nil {
			tb.Errorf("%s %s = %v, want exit 0\n%s", service, arg, err, out)
			continue
		}
		if arg == "--version" {
			if !strings.HasPrefix(string(out), service+" ") {
				tb.Errorf("%s --version = %q, want it to start with %q", service, out, service+" ")
			}
			continue
		}
		for _, s := range r.Settings() {
			if !strings.Contains(string(out), "\n  "+s.Name+" ") {
				tb.Errorf("%s %s does not list %s:\n%s", service, arg, s.Name, out)
			}
		}
	}
	out, err := exec.Command(binary, "--bogus").CombinedOutput()
	if code := exitCode(err); code != 2 {
		tb.Errorf("%s --bogus exited %d, want 2\n%s", service, code, out)
	}
}

func exitCode(err error) int {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
