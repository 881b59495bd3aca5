package httpxtest

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/envconf"
)

// CheckSettingsDocumented checks the settings a service's config reads (found
// by running config over an empty environment, as --help does) against the
// README at readme: each has a meaning for --help, and a row in the
// Configuration table under the heading "<Title>:" of the service, with the same
// default, and that table has no row for a setting the service does not read.
func CheckSettingsDocumented[C any](tb testing.TB, config func(*envconf.Reader) (C, error), readme, title string) {
	tb.Helper()
	r := envconf.NewFrom(nil)
	envconf.Shared(r)
	_, _ = config(r)
	rows := readmeSettings(tb, readme, title)
	read := map[string]bool{}
	for _, s := range r.Settings() {
		read[s.Name] = true
		if s.Help == "" {
			tb.Errorf("%s has no meaning for --help: pass it as the last argument of its read", s.Name)
		}
		def, ok := rows[s.Name]
		switch {
		case !ok:
			tb.Errorf("%s is read by the %s but has no row in the README's Configuration table", s.Name, title)
		case s.Default != "" && def != s.Default:
			tb.Errorf("%s: README default %q, the code's %q", s.Name, def, s.Default)
		}
	}
	for name := range rows {
		if !read[name] {
			tb.Errorf("%s has a README row for the %s, which does not read it", name, title)
		}
	}
}

// readmeSettings returns the rows of the Configuration table under "title:"
// (name -> default, unquoted).
func readmeSettings(tb testing.TB, path, title string) map[string]string {
	tb.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(tb, err)
	_, conf, ok := strings.Cut(string(raw), "\n## Configuration\n")
	require.True(tb, ok, "README.md has no Configuration section")
	conf, _, _ = strings.Cut(conf, "\n## ")
	_, table, ok := strings.Cut(conf, "\n"+title+":\n")
	require.True(tb, ok, "README's Configuration section has no %q table", title)
	rows := map[string]string{}
	for line := range strings.Lines(strings.TrimLeft(table, "\n")) {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		rows[strings.Trim(strings.TrimSpace(cells[1]), "`")] = strings.Trim(strings.TrimSpace(cells[2]), "`")
	}
	require.NotEmpty(tb, rows, "README's %q table has no rows", title)
	return rows
}

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
