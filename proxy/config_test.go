package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/proxy/internal/limits"
	"github.com/flashgate/flashgate/shared/envconf"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
)

// TestConfigWarmConns: the warm-up settings have their defaults, and
// REDIS_WARM_CONNS above REDIS_POOL_SIZE (connections the pool cannot hold)
// is refused at start with a message naming both.
func TestConfigWarmConns(t *testing.T) {
	env := func(kv ...string) *envconf.Reader {
		m := map[string]string{"REDIS_URL": "redis://127.0.0.1:1", "PROXY_TOKEN": "edge-token"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return envconf.NewFrom(m)
	}
	c, err := configFrom(env())
	assert.NoError(t, err)
	assert.Equal(t, 4, c.RedisWarm)
	assert.Equal(t, 4, c.LedgerWarm)
	_, err = configFrom(env("REDIS_POOL_SIZE", "8", "REDIS_WARM_CONNS", "8"))
	assert.NoError(t, err)
	_, err = configFrom(env("REDIS_POOL_SIZE", "8", "REDIS_WARM_CONNS", "9"))
	if assert.Error(t, err) {
		assert.Contains(t, err.Error(), "REDIS_WARM_CONNS")
		assert.Contains(t, err.Error(), "REDIS_POOL_SIZE")
	}
	_, err = configFrom(env("LEDGER_WARM_CONNS", "-1"))
	assert.ErrorContains(t, err, "LEDGER_WARM_CONNS")
}

// TestConfigSwitch checks that PROXY_COALESCE takes on/off, true/false and
// 1/0, and that anything else stops the start naming the variable.
func TestConfigSwitch(t *testing.T) {
	for v, want := range map[string]bool{"on": true, "true": true, "1": true, "TRUE": true, "off": false, "false": false, "0": false} {
		c, err := configFrom(envconf.NewFrom(map[string]string{"REDIS_URL": "redis://x", "PROXY_AUTH": "off", "PROXY_COALESCE": v}))
		if err != nil || c.Coalesce != want {
			t.Errorf("configFrom(PROXY_COALESCE=%s) = %v, %v, want %v", v, c.Coalesce, err, want)
		}
	}
	_, err := configFrom(envconf.NewFrom(map[string]string{"REDIS_URL": "redis://x", "PROXY_AUTH": "off", "PROXY_COALESCE": "yes please"}))
	if err == nil || !strings.Contains(err.Error(), "PROXY_COALESCE") {
		t.Errorf("configFrom(PROXY_COALESCE=yes please) = %v, want an error naming PROXY_COALESCE", err)
	}
}

// TestCommandLine runs bin/proxy --help and --version: exit 0, every setting listed.
func TestCommandLine(t *testing.T) {
	t.Parallel()
	httpxtest.CheckCommandLine(t, proxyBinary(t), "proxy", configFrom)
}

// TestConfigEdgeAuth checks that the edge requires a token by default: no
// PROXY_TOKEN nor PROXY_TOKENS stops the start unless PROXY_AUTH=off, which
// beside a token is refused too; PROXY_TOKENS takes the scopes reserve and
// settle (the edge's routes take no other), and a bad value is refused naming
// the variable and never the token.
func TestConfigEdgeAuth(t *testing.T) {
	env := func(kv ...string) *envconf.Reader {
		m := map[string]string{"REDIS_URL": "redis://x"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return envconf.NewFrom(m)
	}
	c, err := configFrom(env("PROXY_AUTH", "off"))
	assert.NoError(t, err)
	assert.True(t, c.OpenEdge)
	c, err = configFrom(env("PROXY_TOKEN", "t0", "PROXY_TOKENS", "shop:ts:reserve,pay:tp:settle,ops:to"))
	assert.NoError(t, err)
	assert.False(t, c.OpenEdge)
	assert.Equal(t, "t0", c.Token)
	assert.Equal(t, map[string]envconf.Credential{
		"shop": {Token: "ts", Scopes: []string{"reserve"}},
		"pay":  {Token: "tp", Scopes: []string{"settle"}},
		"ops":  {Token: "to"},
	}, c.Tokens)
	_, err = configFrom(env("PROXY_TOKENS", "shop:ts:reserve"))
	assert.NoError(t, err, "PROXY_TOKENS alone is enough")

	for _, bad := range [][]string{
		{},
		{"PROXY_AUTH", "on"},
		{"PROXY_AUTH", "off", "PROXY_TOKEN", "t0"},
		{"PROXY_AUTH", "off", "PROXY_TOKENS", "shop:ts"},
		{"PROXY_TOKENS", "shop:ts:read"},
		{"PROXY_TOKENS", "shop:ts:internal"},
		{"PROXY_TOKENS", "shop:ts,pay:ts"},
		{"PROXY_TOKEN", "ts", "PROXY_TOKENS", "shop:ts:reserve"},
		{"PROXY_TOKEN", "t0", "PROXY_TOKENS", "default:ts"},
	} {
		_, err := configFrom(env(bad...))
		if assert.Error(t, err, "%v", bad) {
			assert.Contains(t, err.Error(), "PROXY_", "%v", bad)
			assert.NotContains(t, err.Error(), ":ts", "%v: no token in the message", bad)
		}
	}
}

// TestConfigCodesAndLookups: LIVE_CODES_REFRESH and LEDGER_LOOKUPS have their
// defaults, take 0s (every unknown code re-reads the set) and a positive
// budget, and refuse a negative interval or a budget below 1 by name.
func TestConfigCodesAndLookups(t *testing.T) {
	env := func(kv ...string) *envconf.Reader {
		m := map[string]string{"REDIS_URL": "redis://127.0.0.1:1", "PROXY_AUTH": "off"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return envconf.NewFrom(m)
	}
	c, err := configFrom(env())
	assert.NoError(t, err)
	assert.Equal(t, time.Second, c.CodesRefresh)
	assert.Equal(t, 8, c.LedgerLookups)
	c, err = configFrom(env("LIVE_CODES_REFRESH", "0s", "LEDGER_LOOKUPS", "1"))
	assert.NoError(t, err)
	assert.Equal(t, time.Duration(0), c.CodesRefresh)
	assert.Equal(t, 1, c.LedgerLookups)
	_, err = configFrom(env("LIVE_CODES_REFRESH", "-1s"))
	assert.ErrorContains(t, err, "LIVE_CODES_REFRESH")
	_, err = configFrom(env("LEDGER_LOOKUPS", "0"))
	assert.ErrorContains(t, err, "LEDGER_LOOKUPS")
}

// TestConfigCheckoutSecret: CHECKOUT_TOKEN_SECRET is unset by default (no
// keys: vouchers that require a token are refused), takes
// keyId:secret[,keyId:secret...] in signing order, and a malformed list stops
// the start naming the variable but never showing a secret.
func TestConfigCheckoutSecret(t *testing.T) {
	env := func(secret string) *envconf.Reader {
		m := map[string]string{"REDIS_URL": "redis://127.0.0.1:1", "PROXY_AUTH": "off"}
		if secret != "" {
			m["CHECKOUT_TOKEN_SECRET"] = secret
		}
		return envconf.NewFrom(m)
	}
	c, err := configFrom(env(""))
	assert.NoError(t, err)
	assert.Empty(t, c.CheckoutKeys)
	c, err = configFrom(env("k2:0123456789abcdef-new,k1:0123456789abcdef-old"))
	if assert.NoError(t, err) && assert.Len(t, c.CheckoutKeys, 2) {
		assert.Equal(t, "k2", c.CheckoutKeys[0].ID, "the first key signs")
		assert.Equal(t, "k1", c.CheckoutKeys[1].ID)
	}
	for _, bad := range []string{"k1:short-secret", "0123456789abcdef-nokeyid", "k1:0123456789abcdef-a,k1:0123456789abcdef-b"} {
		_, err := configFrom(env(bad))
		if assert.Error(t, err, bad) {
			assert.Contains(t, err.Error(), "CHECKOUT_TOKEN_SECRET")
			assert.NotContains(t, err.Error(), "0123456789abcdef")
		}
	}
}

// TestConfigLimits: the limits are off by default, early retries are
// refused, an IPv6 client is keyed by its /64, and a TRUSTED_PROXIES that is
// not a list of CIDRs or a CLIENT_KEY_IPV6_PREFIX over 128 stops the start
// naming it.
func TestConfigLimits(t *testing.T) {
	c, err := configFrom(envconf.NewFrom(map[string]string{"REDIS_URL": "redis://x", "PROXY_AUTH": "off"}))
	require.NoError(t, err)
	assert.Equal(t, 0, c.Limits.ClientRate)
	assert.Equal(t, 0, c.Limits.CustomerRate)
	assert.True(t, c.Limits.EarlyRetries)
	assert.Empty(t, c.Limits.Trusted)
	c, err = configFrom(envconf.NewFrom(map[string]string{"REDIS_URL": "redis://x", "PROXY_AUTH": "off", "CLIENT_RATE": "20",
		"CLIENT_BURST": "40", "CUSTOMER_RATE": "1", "TRUSTED_PROXIES": "10.0.0.0/8,127.0.0.1"}))
	require.NoError(t, err)
	assert.Equal(t, limits.Config{ClientRate: 20, ClientBurst: 40, CustomerRate: 1, EarlyRetries: true, IPv6Prefix: 64,
		Trusted: c.Limits.Trusted, RedisTimeout: c.RedisTimeout}, c.Limits)
	assert.Len(t, c.Limits.Trusted, 2)
	_, err = configFrom(envconf.NewFrom(map[string]string{"REDIS_URL": "redis://x", "TRUSTED_PROXIES": "10.0.0.0/99"}))
	assert.ErrorContains(t, err, "TRUSTED_PROXIES")
	_, err = configFrom(envconf.NewFrom(map[string]string{"REDIS_URL": "redis://x", "CLIENT_RATE": "-1"}))
	assert.ErrorContains(t, err, "CLIENT_RATE")
	_, err = configFrom(envconf.NewFrom(map[string]string{"REDIS_URL": "redis://x", "PROXY_AUTH": "off", "CLIENT_KEY_IPV6_PREFIX": "129"}))
	require.ErrorContains(t, err, "CLIENT_KEY_IPV6_PREFIX")
}

// ADMIT_WRITE_TARGET: 0 turns the window off; below 1ms, or at or above
// LEDGER_TIMEOUT, the proxy refuses to start, naming the variable and the bound.
func TestAdmitWriteTargetSetting(t *testing.T) {
	for value, want := range map[string]string{
		"0": "", "10ms": "", "500us": "at least 1ms", "1s": "below LEDGER_TIMEOUT (1s)", "-1s": "ADMIT_WRITE_TARGET",
	} {
		_, err := configFrom(envconf.NewFrom(map[string]string{"REDIS_URL": "redis://127.0.0.1:1/0", "PROXY_AUTH": "off", "ADMIT_WRITE_TARGET": value}))
		if want == "" {
			require.NoError(t, err, value)
			continue
		}
		require.Error(t, err, value)
		assert.Contains(t, err.Error(), "ADMIT_WRITE_TARGET", value)
		assert.Contains(t, err.Error(), want, value)
	}
}
