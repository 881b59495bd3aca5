package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// ctlWith runs flashgatectl in process against the stack with env as its
// whole environment (no token unless env has one) and stdin.
func ctlWith(t *testing.T, env map[string]string, stdin io.Reader, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var stdout, stderr strings.Builder
	a := &app{stdin: stdin, stdout: &stdout, stderr: &stderr, now: time.Now,
		getenv: func(k string) string { return env[k] }, interactive: func() bool { return false }}
	code := a.run(ctx, args)
	return result{code, stdout.String(), stderr.String()}
}

// TestTokenSources: the token comes from --token-file or --token-stdin as
// well as --token and the environment (one source at most); an empty one is
// a usage error; it is never printed.
func TestTokenSources(t *testing.T) {
	t.Parallel()
	env := map[string]string{envLedger: stack.LedgerURL}
	dir := t.TempDir()
	good, empty := filepath.Join(dir, "token"), filepath.Join(dir, "empty")
	assert.NoError(t, os.WriteFile(good, []byte(ledgerToken+"\n"), 0o600))
	assert.NoError(t, os.WriteFile(empty, []byte("\n"), 0o600))
	none := strings.NewReader("")

	assert.Equal(t, exitRefused, ctlWith(t, env, none, "vouchers", "list").code, "no token: 401")
	r := ctlWith(t, env, none, "vouchers", "list", "--token-file", good)
	assert.Equal(t, exitOK, r.code, "--token-file; stderr: %s", r.stderr)
	r = ctlWith(t, env, strings.NewReader(ledgerToken+"\n"), "vouchers", "list", "--token-stdin")
	assert.Equal(t, exitOK, r.code, "--token-stdin; stderr: %s", r.stderr)
	for _, args := range [][]string{
		{"--token-file", empty},
		{"--token-file", filepath.Join(dir, "missing")},
		{"--token-stdin"}, // stdin is empty
		{"--token", ledgerToken, "--token-file", good},
		{"--token-file", good, "--token-stdin"},
	} {
		r := ctlWith(t, env, strings.NewReader(""), append([]string{"vouchers", "list"}, args...)...)
		assert.Equal(t, exitUsage, r.code, "%v: stderr %s", args, r.stderr)
		assert.NotContains(t, r.stderr+r.stdout, ledgerToken, "%v", args)
	}
}

// TestTokenCleartextWarning: a token bound for http:// on another host is
// warned about on stderr; on loopback, over https or without a token, not.
func TestTokenCleartextWarning(t *testing.T) {
	t.Parallel()
	const warning = "over plain http://"
	r := ctlWith(t, map[string]string{envLedger: stack.LedgerURL, envToken: ledgerToken}, strings.NewReader(""), "vouchers", "list")
	assert.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	assert.NotContains(t, r.stderr, warning, "a loopback ledger")
	for base, want := range map[string]bool{
		"http://192.0.2.1:8081": true, "http://ledger.example:8081": true, "http://[2001:db8::1]:8081": true,
		"http://127.0.0.1:8081": false, "http://localhost:8081": false, "http://[::1]:8081": false,
		"https://ledger.example": false,
	} {
		assert.Equal(t, want, cleartextTo(base), "cleartextTo(%s)", base)
	}
	r = ctlWith(t, map[string]string{envToken: ledgerToken}, strings.NewReader(""),
		"vouchers", "list", "--ledger", "http://192.0.2.1:9", "--timeout", "200ms")
	assert.Contains(t, r.stderr, warning, "a token to another host over http://")
	assert.NotContains(t, r.stderr, ledgerToken)
	r = ctlWith(t, nil, strings.NewReader(""), "vouchers", "list", "--ledger", "http://192.0.2.1:9", "--timeout", "200ms")
	assert.NotContains(t, r.stderr, warning, "no token, nothing to warn about")
}
