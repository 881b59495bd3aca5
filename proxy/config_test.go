package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/flashgate/flashgate/shared/envconf"
)

// TestConfigWarmConns: the warm-up settings have their defaults, and
// REDIS_WARM_CONNS above REDIS_POOL_SIZE (connections the pool cannot hold)
// is refused at start with a message naming both.
func TestConfigWarmConns(t *testing.T) {
	env := func(kv ...string) *envconf.Reader {
		m := map[string]string{"REDIS_URL": "redis://127.0.0.1:1"}
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
