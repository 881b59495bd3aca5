package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/shared/envconf"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
)

// TestConfigTokens checks that LEDGER_TOKENS is read beside LEDGER_TOKEN and
// that a bad value fails the start with a message naming the variable.
func TestConfigTokens(t *testing.T) {
	env := func(kv ...string) *envconf.Reader {
		m := map[string]string{"DATABASE_URL": "postgres://x"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return envconf.NewFrom(m)
	}
	c, err := configFrom(env("LEDGER_TOKEN", "t0", "LEDGER_TOKENS", "alice:ta,bob:tb,proxy:tp:internal,pay:tq:settle+reserve"))
	assert.NoError(t, err)
	assert.Equal(t, "t0", c.Token)
	assert.Equal(t, map[string]envconf.Credential{
		"alice": {Token: "ta"}, "bob": {Token: "tb"},
		"proxy": {Token: "tp", Scopes: []string{"internal"}},
		"pay":   {Token: "tq", Scopes: []string{"settle", "reserve"}},
	}, c.Tokens)
	c, err = configFrom(env("LEDGER_TOKENS", "default:td"))
	assert.NoError(t, err, "default may be named when LEDGER_TOKEN is unset")
	assert.Equal(t, map[string]envconf.Credential{"default": {Token: "td"}}, c.Tokens)

	for _, bad := range [][]string{
		{"LEDGER_TOKENS", "alice"},
		{"LEDGER_TOKENS", "alice:ta,alice:tb"},
		{"LEDGER_TOKENS", "alice:ta,bob:ta"},
		{"LEDGER_TOKENS", "al ice:ta"},
		{"LEDGER_TOKENS", "alice:ta,"},
		{"LEDGER_TOKENS", "alice:ta:admin"},
		{"LEDGER_TOKENS", "alice:ta:read+"},
		{"LEDGER_TOKEN", "t0", "LEDGER_TOKENS", "alice:t0:read"},
		{"LEDGER_TOKEN", "t0", "LEDGER_TOKENS", "default:td"},
		{"LEDGER_TOKEN", "t0", "LEDGER_TOKENS", "alice:t0"},
	} {
		_, err := configFrom(env(bad...))
		if assert.Error(t, err, "%v", bad) {
			assert.Contains(t, err.Error(), "LEDGER_TOKENS", "%v", bad)
			assert.NotContains(t, err.Error(), ":ta", "%v: no token in the message", bad)
		}
	}
}

// TestConfigWarmConns: DB_MIN_CONNS above DB_MAX_CONNS would promise
// connections the pool may not hold: the start is refused, naming both.
func TestConfigWarmConns(t *testing.T) {
	env := func(kv ...string) *envconf.Reader {
		m := map[string]string{"DATABASE_URL": "postgres://x", "LEDGER_AUTH": "off"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return envconf.NewFrom(m)
	}
	c, err := configFrom(env())
	assert.NoError(t, err)
	assert.Equal(t, 4, c.MinConns)
	assert.Equal(t, 4, c.RedisWarm)
	_, err = configFrom(env("DB_MIN_CONNS", "32", "DB_MAX_CONNS", "32"))
	assert.NoError(t, err)
	_, err = configFrom(env("DB_MIN_CONNS", "33"))
	if assert.Error(t, err) {
		assert.Contains(t, err.Error(), "DB_MIN_CONNS")
		assert.Contains(t, err.Error(), "DB_MAX_CONNS")
	}
	_, err = configFrom(env("REDIS_WARM_CONNS", "-1"))
	assert.ErrorContains(t, err, "REDIS_WARM_CONNS")
}

// TestCommandLine runs bin/ledger --help and --version: exit 0, every setting listed.
func TestCommandLine(t *testing.T) {
	httpxtest.CheckCommandLine(t, ledgertest.LedgerBinary(t), "ledger", configFrom)
}

// TestConfigFailsClosed: a ledger without LEDGER_TOKEN or LEDGER_TOKENS
// refuses to start unless LEDGER_AUTH=off says so (as the proxy does without
// PROXY_TOKEN); LEDGER_AUTH=off beside a token is refused as ambiguous; and
// DEBUG_ADDR must be loopback, since pprof answers no token.
func TestConfigFailsClosed(t *testing.T) {
	env := func(kv ...string) *envconf.Reader {
		m := map[string]string{"DATABASE_URL": "postgres://x"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return envconf.NewFrom(m)
	}
	for _, tc := range []struct {
		env  []string
		want string // in the error; empty: valid
	}{
		{nil, "LEDGER_TOKEN or LEDGER_TOKENS is required"},
		{[]string{"LEDGER_TOKEN", ""}, "LEDGER_AUTH=off opens the ledger on purpose"},
		{[]string{"LEDGER_AUTH", "on"}, "LEDGER_TOKEN or LEDGER_TOKENS is required"},
		{[]string{"LEDGER_AUTH", "off"}, ""},
		{[]string{"LEDGER_TOKEN", "t0"}, ""},
		{[]string{"LEDGER_TOKENS", "ops:t1"}, ""},
		{[]string{"LEDGER_AUTH", "off", "LEDGER_TOKEN", "t0"}, "both set"},
		{[]string{"LEDGER_AUTH", "off", "LEDGER_TOKENS", "ops:t1"}, "both set"},
		{[]string{"LEDGER_TOKEN", "t0", "DEBUG_ADDR", "127.0.0.1:6061"}, ""},
		{[]string{"LEDGER_TOKEN", "t0", "DEBUG_ADDR", "[::1]:6061"}, ""},
		{[]string{"LEDGER_TOKEN", "t0", "DEBUG_ADDR", "localhost:6061"}, ""},
		{[]string{"LEDGER_TOKEN", "t0", "DEBUG_ADDR", ":6061"}, "DEBUG_ADDR=:6061 must be a loopback address"},
		{[]string{"LEDGER_TOKEN", "t0", "DEBUG_ADDR", "0.0.0.0:6061"}, "must be a loopback address"},
		{[]string{"LEDGER_TOKEN", "t0", "DEBUG_ADDR", "10.1.2.3:6061"}, "must be a loopback address"},
		{[]string{"LEDGER_TOKEN", "t0", "DEBUG_ADDR", "example.com:6061"}, "must be a loopback address"},
	} {
		_, err := configFrom(env(tc.env...))
		if tc.want == "" {
			assert.NoError(t, err, "configFrom(%v)", tc.env)
			continue
		}
		if assert.Error(t, err, "configFrom(%v)", tc.env) {
			assert.Contains(t, err.Error(), tc.want, "configFrom(%v)", tc.env)
			assert.NotContains(t, err.Error(), "t0", "configFrom(%v): no token in the message", tc.env)
		}
	}
}

// No setting lets the reconciler free a Redis hold while its write could still
// commit: the group commit's deadline (WRITE_TIMEOUT) is capped so that it,
// plus the DB_TIMEOUT its last statement may run on the server, ends before
// HANGING_GRACE; a grace with no room for a write at all is refused.
func TestWriteTimeoutWithinGrace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		want time.Duration // 0: refused
	}{
		{map[string]string{}, 10 * time.Second},
		{map[string]string{"HANGING_GRACE": "2s"}, 1400 * time.Millisecond},
		{map[string]string{"HANGING_GRACE": "1s"}, 400 * time.Millisecond},
		{map[string]string{"HANGING_GRACE": "5s", "WRITE_TIMEOUT": "2s"}, 2 * time.Second},
		{map[string]string{"HANGING_GRACE": "5s", "WRITE_TIMEOUT": "20s", "DB_TIMEOUT": "1500ms"}, 3400 * time.Millisecond},
		{map[string]string{"HANGING_GRACE": "1s", "DB_TIMEOUT": "1500ms"}, 0},
	} {
		env := map[string]string{"DATABASE_URL": "postgres://x", "LEDGER_AUTH": "off"}
		for k, v := range tc.env {
			env[k] = v
		}
		c, err := configFrom(envconf.NewFrom(env))
		if tc.want == 0 {
			if assert.Error(t, err, "configFrom(%v)", tc.env) {
				assert.Contains(t, err.Error(), "HANGING_GRACE (1s) must be above DB_TIMEOUT (1.5s)")
			}
			continue
		}
		require.NoError(t, err, "configFrom(%v)", tc.env)
		assert.Equal(t, tc.want, c.WriteTimeout, "WriteTimeout of %v", tc.env)
		assert.Less(t, c.WriteTimeout+c.DBTimeout, c.HangingGrace, "%v", tc.env)
	}
}
