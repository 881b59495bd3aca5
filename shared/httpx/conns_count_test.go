package httpx

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCountConns: a served connection counts from its accept to its close,
// idle keep-alive ones included; flashgate_http_open_connections shows the
// count of Serve's servers.
func TestCountConns(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := NewServer(ln.Addr().String(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	var n atomic.Int64
	countConns(srv, &n)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })

	var conns []net.Conn
	for range 3 {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		require.NoError(t, c.SetDeadline(time.Now().Add(3*time.Second)))
		_, err = fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		resp.Body.Close()
		conns = append(conns, c) // idle now, kept alive
	}
	assert.EqualValues(t, 3, n.Load(), "three idle keep-alive connections")
	for _, c := range conns {
		c.Close()
	}
	assert.Eventually(t, func() bool { return n.Load() == 0 }, 5*time.Second, 10*time.Millisecond, "all closed")

	mfs, err := NewMetrics("test").Registry.Gather()
	require.NoError(t, err)
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	assert.Contains(t, names, "flashgate_http_open_connections")
}
