package httpx_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/httpx/service"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
)

var quiet = slog.New(slog.DiscardHandler)

// served is a service run by Lifecycle.Serve on a free port.
type served struct {
	url   string
	life  *httpx.Lifecycle
	stop  context.CancelFunc // the signal
	done  chan error         // Serve's result
	start time.Time
}

func serve(tb testing.TB, cfg httpx.Shutdown, maxConns int, h func(life *httpx.Lifecycle) http.Handler) *served {
	tb.Helper()
	port, err := devstack.FreePort()
	require.NoError(tb, err)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	stopping, stop := context.WithCancel(context.Background())
	life := httpx.NewLifecycle(stopping, cfg, quiet)
	s := &served{url: "http://" + addr, life: life, stop: stop, done: make(chan error, 1), start: time.Now()}
	ln, err := httpx.Listen("ADDR", addr)
	require.NoError(tb, err)
	go func() { s.done <- life.Serve(ln, httpx.NewServer(addr, h(life)), maxConns) }()
	tb.Cleanup(func() {
		stop()
		life.End()
	})
	require.Eventually(tb, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 5*time.Second, 10*time.Millisecond)
	return s
}

// TestLifecycleShutdown follows the sequence: at the signal /readyz is 503 at
// once and requests are still served (Connection: close) for the delay; then
// new connections are refused while a request in flight, waiting on work
// under the lifetime context, gets its real answer; the lifetime outlives the
// drain until End.
func TestLifecycleShutdown(t *testing.T) {
	release := make(chan struct{})
	var lifeErrAtAnswer error
	s := serve(t, httpx.Shutdown{Delay: 300 * time.Millisecond, Timeout: 10 * time.Second}, 0, func(life *httpx.Lifecycle) http.Handler {
		r := service.NewEngine(service.Config{Log: quiet, Ready: func(*gin.Context) error { return life.Err() }})
		r.GET("/slow", func(c *gin.Context) {
			<-release // work the request waits on, e.g. a group commit
			lifeErrAtAnswer = life.Context().Err()
			c.String(http.StatusOK, "done")
		})
		r.GET("/fast", func(c *gin.Context) { c.String(http.StatusOK, "fast") })
		return r
	})
	client := &http.Client{Timeout: 10 * time.Second}
	get := func(path string) (*http.Response, error) {
		resp, err := client.Get(s.url + path)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	resp, err := get("/readyz")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)

	slow := make(chan *http.Response, 1)
	go func() {
		resp, err := get("/slow")
		assert.NoError(t, err, "the request in flight lost its connection")
		slow <- resp
	}()
	time.Sleep(50 * time.Millisecond) // the slow request is in flight
	signalled := time.Now()
	s.stop()

	resp, err = get("/readyz")
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "/readyz after the signal")
	assert.Less(t, time.Since(signalled), 200*time.Millisecond, "/readyz was not 503 at once")
	resp, err = get("/fast")
	require.NoError(t, err, "a request during SHUTDOWN_DELAY")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.True(t, resp.Close, "answers during the delay close their connection")

	// After the delay: no new connections, the request in flight still waits.
	time.Sleep(time.Until(signalled.Add(500 * time.Millisecond)))
	_, err = get("/fast")
	require.Error(t, err, "a new connection after the delay was accepted")
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	select {
	case err := <-s.done:
		t.Fatalf("Serve returned %v while a request was in flight", err)
	default:
	}
	close(release)
	resp = <-slow
	require.NotNil(t, resp)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the request in flight got its real answer")
	assert.NoError(t, lifeErrAtAnswer, "the lifetime ended before the drain")
	select {
	case err := <-s.done:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after the drain")
	}
	assert.NoError(t, s.life.Context().Err(), "the lifetime ends only with End")
	s.life.End()
	assert.Error(t, s.life.Context().Err())
}

// TestLifecycleTimeout: a request still in flight at SHUTDOWN_TIMEOUT does not
// keep the service: Serve returns by the deadline and the lifetime ends, so
// the work the request waits on is cut.
func TestLifecycleTimeout(t *testing.T) {
	var wg sync.WaitGroup
	s := serve(t, httpx.Shutdown{Delay: 100 * time.Millisecond, Timeout: time.Second}, 0, func(life *httpx.Lifecycle) http.Handler {
		r := httpx.NewEngine(quiet)
		r.GET("/stuck", func(c *gin.Context) {
			<-life.Context().Done()
			c.Status(http.StatusServiceUnavailable)
		})
		return r
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		resp, err := http.Get(s.url + "/stuck")
		if err == nil {
			resp.Body.Close()
		}
	}()
	time.Sleep(50 * time.Millisecond)
	signalled := time.Now()
	s.stop()
	select {
	case err := <-s.done:
		t.Logf("Serve returned after %v: %v", time.Since(signalled), err)
		assert.Less(t, time.Since(signalled), time.Second+500*time.Millisecond, "Serve outlived SHUTDOWN_TIMEOUT")
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return within SHUTDOWN_TIMEOUT")
	}
	assert.Error(t, s.life.Context().Err(), "the lifetime outlived SHUTDOWN_TIMEOUT")
	wg.Wait()
}

// TestReadyzDeadline: a readiness check that hangs answers 503 within about
// a second (httpx.ReadyTimeout), never hangs with its dependency.
func TestReadyzDeadline(t *testing.T) {
	hung := make(chan struct{})
	defer close(hung)
	r := service.NewEngine(service.Config{Log: quiet, Ready: func(c *gin.Context) error {
		select { // a dependency that answers nothing, whatever the deadline
		case <-hung:
		case <-time.After(time.Minute):
		}
		return nil
	}})
	s := serve(t, httpx.Shutdown{Timeout: time.Second}, 0, func(*httpx.Lifecycle) http.Handler { return r })
	start := time.Now()
	resp, err := http.Get(s.url + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Contains(t, []string{"1", "2", "3"}, resp.Header.Get(api.HeaderRetryAfter))
	took := time.Since(start)
	assert.GreaterOrEqual(t, took, httpx.ReadyTimeout-50*time.Millisecond)
	assert.Less(t, took, httpx.ReadyTimeout+time.Second, "/readyz waited for the hung check")
}

func TestShutdownCheck(t *testing.T) {
	ok := httpx.Shutdown{Delay: 5 * time.Second, Timeout: 25 * time.Second}
	assert.NoError(t, ok.Check(10*time.Second, "LEDGER_TIMEOUT"))
	bad := httpx.Shutdown{Delay: 5 * time.Second, Timeout: 12 * time.Second}
	err := bad.Check(10*time.Second, "LEDGER_TIMEOUT")
	require.Error(t, err)
	for _, want := range []string{"SHUTDOWN_TIMEOUT (12s)", "SHUTDOWN_DELAY (5s)", "LEDGER_TIMEOUT (10s)"} {
		assert.Contains(t, err.Error(), want)
	}
	assert.False(t, errors.Is(err, context.Canceled))
}
