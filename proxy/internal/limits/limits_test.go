package limits

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClientKey: the peer address keys a request unless the peer is a
// trusted proxy; then X-Forwarded-For is read from the right, past the
// trusted addresses, so that what a client writes into the header itself
// (to the left) is never believed; a named token's name beats any address.
func TestClientKey(t *testing.T) {
	trusted, err := ParseTrustedProxies("127.0.0.1/32, 10.0.0.0/8,::1")
	require.NoError(t, err)
	for _, tc := range []struct {
		peer, xff, name string
		trusted         bool
		want            string
	}{
		{peer: "192.0.2.7:5555", want: "192.0.2.7"},
		{peer: "192.0.2.7:5555", xff: "198.51.100.1", want: "192.0.2.7"},                // no trusted proxies
		{peer: "192.0.2.7:5555", xff: "198.51.100.1", trusted: true, want: "192.0.2.7"}, // the peer is not trusted
		{peer: "127.0.0.1:5555", xff: "198.51.100.1", trusted: true, want: "198.51.100.1"},
		{peer: "127.0.0.1:5555", xff: "6.6.6.6, 198.51.100.1, 10.1.2.3", trusted: true, want: "198.51.100.1"},
		{peer: "127.0.0.1:5555", xff: "10.9.9.9, 10.1.2.3", trusted: true, want: "10.9.9.9"}, // all trusted: the left-most
		{peer: "127.0.0.1:5555", trusted: true, want: "127.0.0.1"},
		{peer: "[::1]:5555", xff: "2001:db8::1", trusted: true, want: "2001:db8::1"},
		{peer: "127.0.0.1:5555", xff: "198.51.100.1", trusted: true, name: "shop-a", want: "token:shop-a"},
		{peer: "192.0.2.7:5555", name: "default", want: "192.0.2.7"}, // the one shared PROXY_TOKEN names nobody
	} {
		k := clientKeys{}
		if tc.trusted {
			k.trusted = trusted
		}
		c, _ := gin.CreateTestContext(httptest.NewRecorder())
		c.Request = httptest.NewRequest(http.MethodPost, "/", nil)
		c.Request.RemoteAddr = tc.peer
		if tc.xff != "" {
			c.Request.Header.Set(headerForwardedFor, tc.xff)
		}
		if tc.name != "" {
			c.Set("flashgate.actor", tc.name)
		}
		if got := k.key(c); got != tc.want {
			t.Errorf("key(peer %s, X-Forwarded-For %q, trusted %v, token %q) = %q, want %q",
				tc.peer, tc.xff, tc.trusted, tc.name, got, tc.want)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "not-an-address", "1.2.3"} {
		if _, err := ParseTrustedProxies(bad); err == nil {
			t.Errorf("ParseTrustedProxies(%q) = nil error, want one", bad)
		}
	}
}

// TestBucketsHoldTheRate: many goroutines of one key at one instant get
// exactly the burst, and a second later exactly the rate more, whatever other
// keys do meanwhile.
func TestBucketsHoldTheRate(t *testing.T) {
	b := newBuckets(20, 30, 1_000)
	now := time.Now()
	take := func(at time.Time, key string, n int) int {
		var ok atomic.Int64
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				if got, _ := b.take(key, at); got {
					ok.Add(1)
				}
			})
		}
		wg.Wait()
		return int(ok.Load())
	}
	assert.Equal(t, 30, take(now, "bot", 500), "the burst")
	assert.Equal(t, 30, take(now, "other", 100), "another key has its own bucket")
	ok, wait := b.take("bot", now)
	assert.False(t, ok)
	assert.Equal(t, 50*time.Millisecond, wait, "one token at 20 a second")
	assert.Equal(t, 20, take(now.Add(time.Second), "bot", 500), "a second's rate")
}

// TestBucketsBounded: past its bound of keys the store drops the least
// recently used, never holds more, and a key in steady use keeps its bucket
// (its limit holds) while a flood of new keys churns through.
func TestBucketsBounded(t *testing.T) {
	const most = 1_600 // 100 a shard
	b := newBuckets(1, 5, most)
	now := time.Now()
	for range 5 {
		ok, _ := b.take("steady", now)
		require.True(t, ok)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 5_000 {
				b.take(fmt.Sprintf("flood-%d-%d", g, i), now)
				if i%50 == 0 {
					b.take("steady", now) // in use: never the least recently used of its shard
				}
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, b.len(), most)
	assert.Equal(t, most, b.len(), "full")
	ok, _ := b.take("steady", now)
	assert.False(t, ok, "the steady key's bucket was kept: still empty")
}

// TestComebacksBoundedAndExpire: an entry answers until its time, put off
// once by the penalty of its first early comeback, and is forgotten after; the store never holds more than its bound, sweeping passed
// entries first.
func TestComebacksBoundedAndExpire(t *testing.T) {
	const most = 160 // 10 a shard
	cb := newComebacks(most)
	now := time.Now()
	cb.set("order:a", now.Add(2*time.Second), now)
	until, early := cb.early("order:a", now.Add(time.Second), 3*time.Second)
	assert.True(t, early)
	assert.Equal(t, now.Add(5*time.Second), until, "put off by the penalty")
	until, early = cb.early("order:a", now.Add(2*time.Second), 3*time.Second)
	assert.True(t, early)
	assert.Equal(t, now.Add(5*time.Second), until, "put off once only")
	_, early = cb.early("order:a", now.Add(5*time.Second), 3*time.Second)
	assert.False(t, early, "at its time it may come back")
	assert.Equal(t, 0, cb.len(), "and it is forgotten")
	assert.False(t, cb.holding(), "none held: a reserve has nothing to be refused for")
	assert.False(t, (*comebacks)(nil).holding(), "RETRY_EARLY_REFUSED off")

	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2_000 {
				cb.set(fmt.Sprintf("order:%d-%d", g, i), now.Add(time.Second), now)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, most, cb.len())
	assert.EqualValues(t, most, cb.entries.Load(), "the count holding reads, kept by 16,000 concurrent sets")
	later := now.Add(2 * time.Second) // every entry passed: the full shard's sweep clears its own
	cb.set("order:new", later.Add(time.Second), later)
	assert.Equal(t, most-most/comebackShards+1, cb.len())
	assert.EqualValues(t, cb.len(), cb.entries.Load(), "after a sweep")
	assert.True(t, cb.holding())
}

// TestClientKeyNormalised: an IPv6 client is keyed by its /64 (or the
// CLIENT_KEY_IPV6_PREFIX given), so that one host's network shares one
// bucket; an X-Forwarded-For entry written as ip:port is keyed by its
// address alone, and an IPv4-mapped address by its IPv4.
func TestClientKeyNormalised(t *testing.T) {
	trusted, err := ParseTrustedProxies("127.0.0.1")
	require.NoError(t, err)
	for _, tc := range []struct {
		peer, xff string
		bits      int
		want      string
	}{
		{peer: "[2001:db8:1:2:aaaa::1]:5555", bits: 64, want: "2001:db8:1:2::/64"},
		{peer: "[2001:db8:1:2:bbbb::7]:5555", bits: 64, want: "2001:db8:1:2::/64"},
		{peer: "[2001:db8:1:2:bbbb::7]:5555", bits: 48, want: "2001:db8:1::/48"},
		{peer: "[2001:db8:1:2:bbbb::7]:5555", bits: 128, want: "2001:db8:1:2:bbbb::7"},
		{peer: "[::ffff:192.0.2.7]:5555", bits: 64, want: "192.0.2.7"},
		{peer: "127.0.0.1:5555", xff: "203.0.113.5:41000", bits: 64, want: "203.0.113.5"},
		{peer: "127.0.0.1:5555", xff: "203.0.113.5:41001", bits: 64, want: "203.0.113.5"},
		{peer: "127.0.0.1:5555", xff: "[2001:db8:9:9::5]:41001", bits: 64, want: "2001:db8:9:9::/64"},
		{peer: "127.0.0.1:5555", xff: "2001:db8:9:9:1::5, 127.0.0.1:7000", bits: 64, want: "2001:db8:9:9::/64"},
	} {
		k := clientKeys{trusted: trusted, v6Bits: tc.bits}
		c, _ := gin.CreateTestContext(httptest.NewRecorder())
		c.Request = httptest.NewRequest(http.MethodPost, "/", nil)
		c.Request.RemoteAddr = tc.peer
		if tc.xff != "" {
			c.Request.Header.Set(headerForwardedFor, tc.xff)
		}
		if got := k.key(c); got != tc.want {
			t.Errorf("key(peer %s, X-Forwarded-For %q, /%d) = %q, want %q", tc.peer, tc.xff, tc.bits, got, tc.want)
		}
	}
}
