package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

// setting is one line of a service's --help: its default ("" when unset) and
// whether it has a meaning.
type setting struct {
	def     string
	meaning bool
}

// TestSettingsDocumented runs each service's --help, which lists every setting
// its configuration reads through shared/envconf (the same reads that fill
// it), and checks docs/configuration.md against it: each setting has a meaning
// and a row under the service's heading with the same default, and no row
// names a setting the service does not read.
func TestSettingsDocumented(t *testing.T) {
	bin := devstacktest.Binaries(t, "github.com/flashgate/flashgate/ledger", "github.com/flashgate/flashgate/proxy")
	const rel = "docs/configuration.md"
	page := read(t, rel)
	for service, head := range map[string]string{"ledger": "## Ledger", "proxy": "## Proxy"} {
		reads := helpSettings(t, filepath.Join(bin, service))
		rows := settingRows(section(t, page, rel, head))
		require.NotEmpty(t, rows, "%s has no settings table under %q", rel, head)
		for name, s := range reads {
			def, ok := rows[name]
			switch {
			case !s.meaning:
				t.Errorf("%s: %s has no meaning for --help: pass it as the last argument of its read", service, name)
			case !ok:
				t.Errorf("%s reads %s, which has no row under %q in %s", service, name, head, rel)
			case s.def != "" && def != s.def:
				t.Errorf("%s: %s's default is %q in %s, %q in the code", service, name, def, rel, s.def)
			}
		}
		for name := range rows {
			if _, ok := reads[name]; !ok {
				t.Errorf("%s has a row for %s under %q, which the %s does not read", rel, name, head, service)
			}
		}
	}
}

// helpSettings runs binary --help with an empty environment and returns the
// settings it lists: the lines "  NAME  default  meaning" after "Environment".
func helpSettings(t *testing.T, binary string) map[string]setting {
	t.Helper()
	cmd := exec.Command(binary, "--help")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.Output()
	require.NoError(t, err, "%s --help", binary)
	_, env, ok := strings.Cut(string(out), "\nEnvironment")
	require.True(t, ok, "%s --help lists no environment:\n%s", binary, out)
	settings := map[string]setting{}
	for _, line := range strings.Split(env, "\n")[1:] {
		f := strings.Fields(line)
		if !strings.HasPrefix(line, "  ") || len(f) < 2 {
			continue
		}
		def := f[1]
		if def == "(unset)" {
			def = ""
		}
		settings[f[0]] = setting{def: def, meaning: len(f) > 2}
	}
	require.NotEmpty(t, settings, "%s --help lists no settings", binary)
	return settings
}

// settingRows reads a settings table: `NAME` -> its default, unquoted.
func settingRows(lines []string) map[string]string {
	rows := map[string]string{}
	for _, line := range lines {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "| `") || len(cells) < 4 {
			continue
		}
		rows[strings.Trim(strings.TrimSpace(cells[1]), "`")] = strings.Trim(strings.TrimSpace(cells[2]), "`")
	}
	return rows
}
