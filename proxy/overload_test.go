package main

import (
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

// procStack is bin/ledger and bin/proxy as processes with their default
// settings (MAX_INFLIGHT, MAX_INFLIGHT_PER_VOUCHER, VOUCHER_WAIT,
// LEDGER_TIMEOUT, DB_TIMEOUT): what an operator runs.
type procStack struct {
	*stack
	Proxy *devstack.Service
}

func newProcStack(tb testing.TB, o stackOptions) procStack {
	tb.Helper()
	s := newStack(tb, o) // the ledger process, and an in-process proxy unused here
	port, err := devstack.FreePort()
	require.NoError(tb, err)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	bin := filepath.Join(devstacktest.Binaries(tb, "../proxy"), "proxy")
	env := []string{"PROXY_ADDR=" + addr, "REDIS_URL=" + o.redisURL, "LEDGER_URL=" + s.LedgerURL, "LEDGER_TOKEN=test-token", devstack.OpenEdge,
		"SHUTDOWN_DELAY=0s"} // no load balancer to wait for: a test's stop is immediate (the default held each test 5 s)
	if o.redisURL == "" {
		env[1] = "REDIS_URL=" + devstacktest.RedisURL(tb)
	}
	p, err := devstack.StartService("proxy", bin, env, "http://"+addr+"/healthz", devstacktest.ServiceLog(tb, "proxy"))
	require.NoError(tb, err)
	tb.Cleanup(func() { p.Stop() })
	s.ProxyURL = "http://" + addr
	return procStack{stack: s, Proxy: p}
}

// answer is one request's outcome as the client saw it.
type answer struct {
	status     int
	retryAfter string
	took       time.Duration
	err        error // no HTTP answer at all
}

// fire sends n requests at once (each from its own goroutine, released
// together) and returns their answers. Each goroutine first opens its
// keep-alive connection (GET warm, never shed), so that the times measured
// are the service's answers, not n TCP handshakes at once (a SYN dropped by a
// full backlog is resent after a second).
func fire(tb testing.TB, n int, warm string, send func(c *http.Client, i int) (*http.Response, error)) []answer {
	tb.Helper()
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	tb.Cleanup(c.CloseIdleConnections)
	out := make([]answer, n)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			if resp, err := c.Get(warm); err == nil {
				resp.Body.Close()
			}
			ready.Done()
			<-start
			out[i] = timed(c, i, send)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	return out
}

func timed(c *http.Client, i int, send func(c *http.Client, i int) (*http.Response, error)) answer {
	t0 := time.Now()
	resp, err := send(c, i)
	a := answer{took: time.Since(t0), err: err}
	if err == nil {
		resp.Body.Close()
		a.status, a.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
	}
	return a
}

// tally counts answers by status (-1: no answer) and returns the p99 latency.
func tally(as []answer) (map[int]int, time.Duration) {
	counts := map[int]int{}
	took := make([]time.Duration, 0, len(as))
	for _, a := range as {
		st := a.status
		if a.err != nil {
			st = -1
		}
		counts[st]++
		took = append(took, a.took)
	}
	slices.Sort(took)
	return counts, took[(len(took)*99+99)/100-1]
}

func reserveReq(base, code string, customer int64, order string) func(c *http.Client) (*http.Response, error) {
	return func(c *http.Client) (*http.Response, error) {
		body := fmt.Sprintf(`{"customerId":%d,"orderId":%q,"orderAmount":5000}`, customer, order)
		return c.Post(base+"/vouchers/"+code+"/reservations", "application/json", strings.NewReader(body))
	}
}

// TestArticleRaceWithDefaults is the article's race through both services
// with their default bounds: 200 concurrent reserves on a 10-use standard
// voucher are answered 10 x 201 and 190 x 409, none shed: the per-voucher
// bound's short wait lets the whole race through.
func TestArticleRaceWithDefaults(t *testing.T) {
	s := newProcStack(t, stackOptions{})
	code := newCode(t)
	s.createVoucher(t, code, 10, 1, false)
	as := fire(t, 200, s.ProxyURL+"/healthz", func(c *http.Client, i int) (*http.Response, error) {
		return reserveReq(s.ProxyURL, code, int64(i+1), fmt.Sprintf("%s-%d", code, i))(c)
	})
	counts, p99 := tally(as)
	t.Logf("article's race: %v, p99 %v", counts, p99)
	require.Equal(t, map[int]int{201: 10, 409: 190}, counts)
	d := s.db(t, code)
	require.Equal(t, 10, d.Used)
	require.Equal(t, 10, d.Active)
}

// TestThousandOnOneStandardVoucher: 1,000 concurrent reserves on one standard
// voucher through both services with their defaults are all answered, 201
// or 503 with Retry-After, and the database holds every 201 (and at most the
// orders answered 503 besides, whose commit outran the proxy's deadline). The p99
// target is 1 s; the assertion leaves a loaded machine a margin.
func TestThousandOnOneStandardVoucher(t *testing.T) {
	s := newProcStack(t, stackOptions{})
	code := newCode(t)
	s.createVoucher(t, code, 5_000, 1, false)
	as := fire(t, 1000, s.ProxyURL+"/healthz", func(c *http.Client, i int) (*http.Response, error) {
		return reserveReq(s.ProxyURL, code, int64(i+1), fmt.Sprintf("%s-%d", code, i))(c)
	})
	counts, p99 := tally(as)
	t.Logf("1,000 concurrent reserves on one standard voucher: %v, p99 %v", counts, p99)
	require.Equal(t, 1000, counts[201]+counts[503], "every request answered 201 or 503: %v", counts)
	for _, a := range as {
		if a.status == 503 {
			require.Contains(t, []string{"1", "2", "3"}, a.retryAfter, "a 503 carries Retry-After, 1-3 s")
		}
	}
	// Every 201 has its row. A 503 the proxy gave at LEDGER_TIMEOUT (a loaded
	// machine) may come while the ledger commits: that order holds its row,
	// and its retry with the same orderId gets the 201 replayed.
	used := s.db(t, code).Used
	require.GreaterOrEqual(t, used, counts[201], "the database holds every 201")
	require.LessOrEqual(t, used, counts[201]+counts[503], "rows only for orders answered 201 or 503")
	require.Less(t, p99, 2*time.Second, "p99 of 1,000 concurrent reserves (target 1 s)")
}
