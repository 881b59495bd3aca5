package httpx

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWarmUpHoldsItsConnectionsAtOnce: the warm-up sends every request, with
// its body and token, and keeps Conns requests in flight at once on as many
// kept-alive connections (the concurrency a burst brings is what it grows the
// process to); an answer other than Want fails it.
func TestWarmUpHoldsItsConnectionsAtOnce(t *testing.T) {
	const conns, requests = 32, 640
	var (
		mu      sync.Mutex
		remotes = map[string]bool{}
		seen    atomic.Int64
		bad     atomic.Int64
		all     = make(chan struct{})
	)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		remotes[r.RemoteAddr] = true
		mu.Unlock()
		var body [64]byte
		n, _ := r.Body.Read(body[:])
		if r.Header.Get("Authorization") != "Bearer tok" || string(body[:n]) != `{"x":0}` || r.URL.Path != "/warm" {
			bad.Add(1)
		}
		switch k := seen.Add(1); {
		case k == conns:
			close(all)
		case k < conns:
			select { // the first wave waits for all of itself: conns at once
			case <-all:
			case <-time.After(5 * time.Second):
			}
		}
		w.WriteHeader(http.StatusBadRequest)
	})
	w := WarmUp{Path: "/warm", Body: []byte(`{"x":0}`), Token: "tok", Want: http.StatusBadRequest, Requests: requests, Conns: conns}
	start := time.Now()
	n, err := w.Serve(context.Background(), h)
	require.NoError(t, err)
	assert.EqualValues(t, requests, n)
	assert.EqualValues(t, requests, seen.Load())
	assert.Zero(t, bad.Load(), "a request without its path, body or token")
	assert.Len(t, remotes, conns, "one kept-alive connection per concurrent request")
	select {
	case <-all:
	default:
		t.Fatal("never had its connections in flight at once")
	}
	assert.Less(t, time.Since(start), 5*time.Second, "the first wave waited for a request that never came")

	w.Want = http.StatusOK
	n, err = w.Serve(context.Background(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
	}))
	require.ErrorContains(t, err, "answered 400, want 200")
	assert.Less(t, n, int64(requests))

	// A shutdown during the warm-up is no fault, and is not logged as one.
	var logged bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w.Run(ctx, h, slog.New(slog.NewJSONHandler(&logged, nil)))
	assert.Contains(t, logged.String(), `"level":"INFO","msg":"serving warm-up cut short: stopping"`)
}
