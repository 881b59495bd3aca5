package admit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/gate"
)

// A change published on the channel drops this proxy's sold-out flag and
// cached terms at once: the next request reaches Redis again.
func TestPublishedChangeForgetsFlagAndTerms(t *testing.T) {
	t.Parallel()
	k := newKit(t, time.Minute)
	code := k.createVoucher(t, 1)
	require.Equal(t, "201", status(k.reserve(code, 1, code+"-1")))
	require.Equal(t, "OUT_OF_STOCK", status(k.reserve(code, 2, code+"-2")))
	calls := k.gate.Calls()
	require.Equal(t, "OUT_OF_STOCK", status(k.reserve(code, 3, code+"-3")))
	require.Equal(t, calls, k.gate.Calls(), "the flag answered")
	_, cached := k.a.vouchers.Get(code)
	require.True(t, cached, "the terms are cached")

	// Published until it lands: the watcher may still be subscribing.
	require.Eventually(t, func() bool {
		if err := gate.PublishChange(context.Background(), k.rdb, code); err != nil {
			return false
		}
		_, cached := k.a.vouchers.Get(code)
		return !k.a.SoldOut(code) && !cached
	}, 5*time.Second, 20*time.Millisecond, "the change dropped the flag and the terms")
	calls = k.gate.Calls()
	assert.Equal(t, "OUT_OF_STOCK", status(k.reserve(code, 4, code+"-4")))
	assert.Greater(t, k.gate.Calls(), calls, "the next request reached Redis")
}
