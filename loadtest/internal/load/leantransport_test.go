package load

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// leanTransport keeps connections alive, reads each answer whole, and sends a
// request with an Idempotency-Key again on a new connection when the server
// had closed the kept-alive one; one without the key gets the error.
func TestLeanTransport(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"error":"OUT_OF_STOCK","echo":"` + string(body) + `"}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	var replays atomic.Int64
	tr := newLeanTransport(time.Second, 4, &replays)
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	post := func(key string) (*http.Response, string, error) {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/vouchers/X/reservations", strings.NewReader("abc"))
		require.NoError(t, err)
		if key != "" {
			req.Header.Set(idempotencyKey, key)
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, "", err
		}
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b), nil
	}
	for range 3 {
		resp, body, err := post("k")
		require.NoError(t, err)
		assert.Equal(t, http.StatusConflict, resp.StatusCode)
		assert.Equal(t, `{"error":"OUT_OF_STOCK","echo":"abc"}`, body)
	}
	assert.EqualValues(t, 1, conns.Load(), "one kept-alive connection")

	srv.CloseClientConnections()
	time.Sleep(50 * time.Millisecond)
	resp, _, err := post("k")
	require.NoError(t, err, "resent on a new connection")
	assert.Equal(t, http.StatusConflict, resp.StatusCode)
	assert.EqualValues(t, 1, replays.Load())

	srv.CloseClientConnections()
	time.Sleep(50 * time.Millisecond)
	_, _, err = post("")
	assert.Error(t, err, "no Idempotency-Key: not resent")
	assert.EqualValues(t, 1, replays.Load())
}
