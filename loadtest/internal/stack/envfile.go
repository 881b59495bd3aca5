package stack

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// EnvVar is one line of an env file: export Name='Value'.
type EnvVar struct{ Name, Value string }

// WriteEnvFile writes vars to path as a file for a shell to source
// (`. path`): a comment, then one `export NAME='value'` line each, quoted so
// that any value reads back as written. The file holds a token, so it is
// its owner's alone (0600), and it appears whole or not at all: it is
// written under a temporary name beside path and renamed, so that a script
// waiting for it never sources half of it. remove deletes it unless another
// writer replaced it since.
func WriteEnvFile(path, comment string, vars []EnvVar) (remove func(), err error) {
	var b strings.Builder
	for line := range strings.SplitSeq(comment, "\n") {
		b.WriteString("# " + line + "\n")
	}
	b.WriteString(Exports(vars))
	text := b.String()
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*") // mode 0600
	if err != nil {
		return nil, fmt.Errorf("env file %s: %w", path, err)
	}
	defer os.Remove(f.Name()) // a no-op once renamed
	_, err = f.WriteString(text)
	err = errors.Join(err, f.Close())
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return nil, fmt.Errorf("env file %s: %w", path, err)
	}
	return func() {
		// Another stack started since with the same file owns it now.
		if now, err := os.ReadFile(path); err == nil && string(now) == text || errors.Is(err, fs.ErrNotExist) {
			_ = os.Remove(path)
		}
	}, nil
}

// Exports is vars as shell lines, `export NAME='value'` each.
func Exports(vars []EnvVar) string {
	var b strings.Builder
	for _, v := range vars {
		fmt.Fprintf(&b, "export %s=%s\n", v.Name, shellQuote(v.Value))
	}
	return b.String()
}

// shellQuote is s in single quotes, each ' in it written '\”.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
