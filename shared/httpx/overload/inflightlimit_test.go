package overload

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/httpx"
)

// TestInflightLimitMoves walks the adaptive bound through its rules on a
// clock of its own (LATENCY_SLO 100ms: target 50ms, an interval of 25ms, so
// n requests finished in an interval are 40n answers a second).
func TestInflightLimitMoves(t *testing.T) {
	now := time.Unix(0, 0)
	l := newInflightLimit(10_000, 100*time.Millisecond, now)
	// finish ends one interval with n requests that held their slots held,
	// the bound full in it or not.
	finish := func(full bool, n int, held time.Duration) {
		if full {
			l.full()
		}
		for range n - 1 {
			l.done(held, now)
		}
		now = now.Add(l.every)
		l.done(held, now)
	}
	require.EqualValues(t, httpx.InflightStart, l.bound(), "it starts at httpx.InflightStart")

	finish(false, 100, 5*time.Millisecond)
	require.EqualValues(t, 256, l.bound(), "fast, but never full: a bound not reached says nothing about a larger one")

	finish(true, 100, 5*time.Millisecond)
	require.EqualValues(t, 512, l.bound(), "full and within the target: grows, at most doubling (a probe)")
	finish(true, 200, 5*time.Millisecond)
	require.EqualValues(t, 1024, l.bound(), "the probe paid (twice the answers for twice the bound): kept, and the next one")
	finish(true, 220, 5*time.Millisecond)
	require.EqualValues(t, 512, l.bound(), "10% more answers for twice the bound: undone")
	for range inflightProbeWait - 1 {
		finish(true, 220, 5*time.Millisecond)
	}
	require.EqualValues(t, 512, l.bound(), "no probe for inflightProbeWait intervals after one failed")
	finish(true, 220, 40*time.Millisecond)
	require.EqualValues(t, 640, l.bound(), "then it probes again: 40ms against a 50ms target grows by 50/40")
	for range 3 {
		finish(true, 220, 40*time.Millisecond)
		require.EqualValues(t, 640, l.bound(), "judged after two mean held times (80ms), not before")
	}
	finish(true, 250, 50*time.Millisecond)
	require.EqualValues(t, 640, l.bound(), "14% more answers for 25% more bound: paid half of it, kept (and at the target: no more)")

	finish(true, 100, 50*time.Millisecond)
	require.EqualValues(t, 640, l.bound(), "at the target: stays")
	finish(false, 100, 80*time.Millisecond)
	require.EqualValues(t, 601, l.bound(), "not reached: a tenth of the way back to the start, slow or not")
	finish(true, 100, 60*time.Millisecond)
	require.EqualValues(t, 501, l.bound(), "full and over the target: shrinks by 50/60")
	finish(true, 100, 200*time.Millisecond)
	require.EqualValues(t, 256, l.bound(), "far over: at most halved, never below the start")
	finish(true, 100, 500*time.Millisecond)
	require.EqualValues(t, 256, l.bound(), "never below the start")

	l.full()
	for range 7 {
		l.done(time.Millisecond, now)
	}
	now = now.Add(l.every)
	l.done(time.Minute, now)
	require.EqualValues(t, 494, l.bound(), "one request holding its slot a minute (an export) counts 4 targets: (7x1ms+200ms)/8 is within the target, and the bound grows by 50/25.9")
	for range 3 {
		finish(true, 100, time.Second)
	}
	require.EqualValues(t, 256, l.bound(), "then requests held 4 targets each: back to the start")

	l.full()
	now = now.Add(time.Second)
	for range inflightSamples - 1 {
		l.done(time.Millisecond, now)
	}
	require.EqualValues(t, 256, l.bound(), "fewer than inflightSamples finished: not judged yet")

	for range 200 {
		finish(true, 4*int(l.bound()), time.Millisecond) // answers in step with the bound
	}
	require.EqualValues(t, 10_000, l.bound(), "probes that pay grow it to its most (MAX_CONNS), never above")
	for range 100 {
		finish(false, 100, time.Millisecond)
	}
	require.EqualValues(t, httpx.InflightStart, l.bound(), "not reached: back at the start")

	small := newInflightLimit(100, 100*time.Millisecond, now)
	require.EqualValues(t, 100, small.bound(), "a start above the most is the most")
}

// TestAdaptiveBoundAdmitsTimelyRequests: 1,000 requests at once (each client
// with its connection open first), each holding its slot a fifth of
// LATENCY_SLO: within the SLO, but four times what 256 slots answer in the
// half SLO a request may wait for one. The fixed bound of 256 sheds those that
// waited half the SLO; the adaptive bound grows while the requests keep within
// its target, and answers every one.
func TestAdaptiveBoundAdmitsTimelyRequests(t *testing.T) {
	const requests, slo = 1000, 2 * time.Second
	run := func(maxInflight, inflightCap int) (map[int]int, *Shedder) {
		r := gin.New()
		sh := NewShedder(maxInflight, inflightCap, slo, nil, nil)
		r.Use(sh.Middleware())
		httpx.Health(r, func(*gin.Context) error { return nil })
		r.GET("/work", func(c *gin.Context) { time.Sleep(slo / 5); c.Status(http.StatusOK) })
		srv := httptest.NewServer(r)
		defer srv.Close()
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: requests}}
		defer client.CloseIdleConnections()
		var open sync.WaitGroup
		open.Add(requests)
		start := make(chan struct{})
		go func() { open.Wait(); close(start) }()
		count := statusCounts(t, requests, func(int) (*http.Response, error) {
			resp, err := client.Get(srv.URL + api.HealthzPath) // never shed: opens the connection
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			open.Done()
			<-start
			return client.Get(srv.URL + "/work")
		})
		return count, sh
	}

	fixed, _ := run(httpx.InflightStart, 0)
	t.Logf("MAX_INFLIGHT=%d: %v", httpx.InflightStart, fixed)
	require.Positive(t, fixed[http.StatusServiceUnavailable], "the fixed bound sheds requests that would have been answered within the SLO")

	adaptive, sh := run(0, 10_000)
	t.Logf("MAX_INFLIGHT=0: %v, bound now %d", adaptive, sh.bound())
	require.Equal(t, map[int]int{http.StatusOK: requests}, adaptive, "the adaptive bound answers every one")
	require.Greater(t, sh.bound(), int64(httpx.InflightStart), "it grew")
}

// TestAdaptiveBoundShrinksWhenAnswersMissTheSLO: 1,000 clients in a closed
// loop (LATENCY_SLO 200ms: target 100ms). While each request holds its slot
// 40ms, the bound is full and grows; once each holds it 400ms, four times the
// target, it goes back to its start, so that fewer are let in to be answered
// late.
func TestAdaptiveBoundShrinksWhenAnswersMissTheSLO(t *testing.T) {
	const slo, clients = 200 * time.Millisecond, 1000
	var hold atomic.Int64
	hold.Store(int64(slo / 5))
	r := testEngine(testConfig{Log: slog.New(slog.DiscardHandler), Metrics: httpx.NewMetrics("test"), InflightCap: 10_000,
		LatencySLO: slo, Ready: func(*gin.Context) error { return nil }})
	r.GET("/work", func(c *gin.Context) { time.Sleep(time.Duration(hold.Load())); c.Status(http.StatusOK) })
	srv := httptest.NewServer(r)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	defer client.CloseIdleConnections()
	// load sends from every client until stop is closed.
	load := func(stop <-chan struct{}) {
		var wg sync.WaitGroup
		for range clients {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					resp, err := client.Get(srv.URL + "/work")
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
	}
	bound := func() int {
		m := regexp.MustCompile(`(?m)^flashgate_http_inflight_limit (\d+)$`).FindStringSubmatch(getBody(t, srv.URL+"/metrics"))
		require.Len(t, m, 2, "the bound's gauge")
		n, _ := strconv.Atoi(m[1])
		return n
	}

	// Full with answers well within the target, it grows. Whether a growth
	// stays is the probe's to judge (TestInflightLimitMoves): on a machine
	// busy with other work the answers a second may not rise with it, and the
	// growth is undone, so the counter says it grew, not the bound at one
	// moment (a make test run once saw 256 after 1 s).
	grew := regexp.MustCompile(`flashgate_http_inflight_limit_moves_total\{way="grow"\} [1-9]`)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); load(stop) }()
	start := time.Now()
	require.Eventually(t, func() bool { return grew.MatchString(getBody(t, srv.URL+"/metrics")) }, 20*time.Second,
		20*time.Millisecond, "full with answers well within the target: grown")
	t.Logf("grown after %v of 40ms requests; bound now %d", time.Since(start).Round(time.Millisecond), bound())
	close(stop)
	<-done

	hold.Store(int64(2 * slo))
	stop = make(chan struct{})
	done = make(chan struct{})
	go func() { defer close(done); load(stop) }()
	start = time.Now()
	require.Eventually(t, func() bool { return bound() == httpx.InflightStart }, 20*time.Second, 50*time.Millisecond,
		"full with answers over the target: back to its start")
	t.Logf("back at %d after %v of 400ms requests", httpx.InflightStart, time.Since(start).Round(time.Millisecond))
	close(stop)
	<-done
	require.Regexp(t, `flashgate_http_inflight_limit_moves_total\{way="shrink"\} [1-9]`, getBody(t, srv.URL+"/metrics"))
}

// getBody returns the body of a GET of url.
func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}
