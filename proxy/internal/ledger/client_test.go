package ledger

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCallResentWhenTheLedgerClosedItsConnection: a POST that went out on a
// kept-alive connection the ledger closed under it (a restart draining its
// connections) is sent again on a new one by the transport, since every call
// to the ledger is idempotent, instead of failing with EOF and answering 503
// (the chaos rolling-restart scenario saw one).
func TestCallResentWhenTheLedgerClosedItsConnection(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 2 { // the second request: the connection goes, unanswered
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	c := NewClient(srv.URL, "token", 5*time.Second)
	ctx := context.Background()
	for i := range 2 {
		rep, err := c.Do(ctx, "unsettled", http.MethodPost, "/internal/x", map[string]any{"orderIds": []string{"o"}})
		require.NoError(t, err, "call %d", i+1)
		assert.Equal(t, http.StatusNoContent, rep.Status)
	}
	assert.EqualValues(t, 3, n.Load(), "the second call was sent again on a new connection")
}
