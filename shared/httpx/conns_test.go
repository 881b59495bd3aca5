package httpx_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/httpx"
)

// keepAlive opens a connection and sends one keep-alive request on it; the
// connection then sits idle, as a client's pooled one does.
func keepAlive(tb testing.TB, url, path string) (net.Conn, *bufio.Reader) {
	tb.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "http://"), time.Second)
	require.NoError(tb, err)
	tb.Cleanup(func() { c.Close() })
	r := bufio.NewReader(c)
	send(tb, c, r, path)
	return c, r
}

func send(tb testing.TB, c net.Conn, r *bufio.Reader, path string) *http.Response {
	tb.Helper()
	require.NoError(tb, c.SetDeadline(time.Now().Add(3*time.Second)))
	_, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
	require.NoError(tb, err)
	resp, err := http.ReadResponse(r, nil)
	require.NoError(tb, err)
	resp.Body.Close()
	return resp
}

// TestIdleConnsMakeRoom: with MAX_CONNS connections open and idle between
// keep-alive requests, a new client is answered at once (the connection idle
// the longest is closed to make room), again and again; only when every
// connection is working on a request does a new one wait for a slot.
func TestIdleConnsMakeRoom(t *testing.T) {
	const maxConns = 8
	busy := make(chan struct{})
	s := serve(t, httpx.Shutdown{Timeout: time.Second}, maxConns, func(*httpx.Lifecycle) http.Handler {
		r := httpx.NewEngine(quiet)
		r.GET("/ok", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
		r.GET("/busy", func(c *gin.Context) { <-busy; c.String(http.StatusOK, "done") })
		return r
	})
	for range maxConns {
		keepAlive(t, s.url, "/ok")
	}
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 3 * maxConns {
		start := time.Now()
		resp, err := client.Get(s.url + "/ok")
		require.NoError(t, err, "new client %d locked out by idle connections", i)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Less(t, time.Since(start), time.Second, "new client %d waited for a slot", i)
	}

	// Every slot working on a request: a new client waits until one ends.
	conns := make([]net.Conn, maxConns)
	for i := range conns {
		c, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
		require.NoError(t, err)
		defer c.Close()
		_, err = fmt.Fprintf(c, "GET /busy HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		conns[i] = c
	}
	time.Sleep(200 * time.Millisecond)
	waited := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		resp, err := client.Get(s.url + "/ok")
		if assert.NoError(t, err) {
			resp.Body.Close()
		}
		waited <- time.Since(start)
	}()
	select {
	case d := <-waited:
		t.Fatalf("a new client was served after %v while every connection was busy", d)
	case <-time.After(300 * time.Millisecond):
	}
	close(busy)
	select {
	case d := <-waited:
		t.Logf("the new client was served %v after it came, once the busy requests ended", d)
	case <-time.After(3 * time.Second):
		t.Fatal("the new client was never served after the busy requests ended")
	}
}

// TestIdleConnsTenThousand is the case at scale: 10,000 idle
// keep-alive connections at MAX_CONNS do not lock a new client out. Both ends
// live in this process, so it holds two descriptors per connection: n is
// 10,000 or what the descriptor limit allows.
func TestIdleConnsTenThousand(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 10,000 connections")
	}
	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	n := min(10_000, (int(lim.Cur)-500)/2)
	t.Logf("%d idle connections at MAX_CONNS=%d", n, n)
	s := serve(t, httpx.Shutdown{Timeout: time.Second}, n, func(*httpx.Lifecycle) http.Handler {
		r := httpx.NewEngine(quiet)
		r.GET("/ok", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
		return r
	})
	for i := range n {
		c, err := net.DialTimeout("tcp", strings.TrimPrefix(s.url, "http://"), time.Second)
		if err != nil {
			t.Skipf("cannot open connection %d (file limit?): %v", i, err)
		}
		defer c.Close()
		if _, err := fmt.Fprintf(c, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Skipf("connection %d: %v", i, err)
		}
	}
	time.Sleep(500 * time.Millisecond) // the last ones answered, idle
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 20 {
		resp, err := client.Get(s.url + "/ok")
		require.NoError(t, err, "new client %d locked out by 10,000 idle connections", i)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
	}
}
