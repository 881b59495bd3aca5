package systemtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// shot is one reserve of a burst: when it was sent and answered, counted from
// the burst's start, and the answer.
type shot struct {
	sent, answered time.Duration
	status         int    // 0: the exchange failed
	code           string // the error code, with NOT_ELIGIBLE's reason after a slash
}

// burst is a fixed number of reserves of one voucher sent by workers
// goroutines at a constant rate (request i not before i/rate from the start, as
// the load harness sends them), each by its own customer (request i is customer
// i+1 with order code-i), with an operator's call made beside it once midAt
// requests were sent.
type burst struct {
	baseURL           string // the proxy
	code              string
	requests, workers int
	rate              float64 // requests per second; 0: as fast as the workers can
	orderAmount       int64
	midAt             int
	mid               func(since func() time.Duration) // runs once, beside the burst
}

// burstOrder is request i's orderId.
func burstOrder(code string, i int) string { return fmt.Sprintf("%s-%d", code, i) }

// fire runs b and returns every request's shot, indexed by request, and how long
// the whole burst took. It returns once mid has returned too.
func fire(tb testing.TB, b burst) ([]shot, time.Duration) {
	tb.Helper()
	hc := &http.Client{
		Timeout:   15 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: b.workers},
	}
	defer hc.CloseIdleConnections()
	url := b.baseURL + "/vouchers/" + b.code + "/reservations"
	shots := make([]shot, b.requests)
	start := time.Now()
	since := func() time.Duration { return time.Since(start) }

	var next atomic.Int64
	midGo := make(chan struct{})
	var midOnce sync.Once
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-midGo
		if b.mid != nil {
			b.mid(since)
		}
	}()
	var workers sync.WaitGroup
	for range b.workers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= b.requests {
					return
				}
				if b.rate > 0 {
					time.Sleep(time.Until(start.Add(time.Duration(float64(i) / b.rate * float64(time.Second)))))
				}
				if i == b.midAt {
					midOnce.Do(func() { close(midGo) })
				}
				body := fmt.Sprintf(`{"customerId":%d,"orderId":%q,"orderAmount":%d}`, i+1, burstOrder(b.code, i), b.orderAmount)
				sh := shot{sent: since()}
				sh.status, sh.code = reserveOnce(hc, url, body)
				sh.answered = since()
				shots[i] = sh
			}
		}()
	}
	workers.Wait()
	elapsed := since()
	midOnce.Do(func() { close(midGo) })
	wg.Wait()
	return shots, elapsed
}

// reserveOnce sends one reserve and returns its status and error code.
func reserveOnce(hc *http.Client, url, body string) (int, string) {
	resp, err := hc.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e struct{ Error, Reason string }
	_ = json.Unmarshal(raw, &e)
	if e.Reason != "" {
		return resp.StatusCode, e.Error + "/" + e.Reason
	}
	return resp.StatusCode, e.Error
}

// tally counts a burst's answers by status and code ("201", "409 OUT_OF_STOCK").
type tally map[string]int

func tallyOf(shots []shot, keep func(shot) bool) tally {
	t := tally{}
	for _, sh := range shots {
		if keep == nil || keep(sh) {
			t[strings.TrimSpace(fmt.Sprintf("%d %s", sh.status, sh.code))]++
		}
	}
	return t
}

func (t tally) String() string {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %d", k, t[k])
	}
	return b.String()
}

// requireAnswered fails t when a shot got no answer or a 5xx other than 503,
// or when more than 1% got 503: a busy machine's database deadlines shed a
// few admitted writes (a fast 503 that the client retries), which the budget
// of the demo's verdict allows too; a fault would be many more.
func requireAnswered(t *testing.T, shots []shot) {
	t.Helper()
	var other, unavailable int
	var first string
	for _, sh := range shots {
		switch {
		case sh.status == http.StatusServiceUnavailable:
			unavailable++
		case sh.status == 0 || sh.status >= 500:
			if other == 0 {
				first = fmt.Sprintf("%d %s", sh.status, sh.code)
			}
			other++
		}
	}
	require.Zero(t, other, "%d requests failed or got a 5xx other than 503, the first: %s", other, first)
	require.LessOrEqual(t, unavailable, len(shots)/100, "%d of %d requests got 503 (at most 1%%)", unavailable, len(shots))
}

// admittedOrders returns the orderIds of the shots answered 201.
func admittedOrders(code string, shots []shot) map[string]bool {
	out := map[string]bool{}
	for i, sh := range shots {
		if sh.status == http.StatusCreated {
			out[burstOrder(code, i)] = true
		}
	}
	return out
}

// percentile returns the p-th percentile (0..100) of the shots' latencies.
func percentile(shots []shot, p float64) time.Duration {
	lat := make([]time.Duration, 0, len(shots))
	for _, sh := range shots {
		lat = append(lat, sh.answered-sh.sent)
	}
	if len(lat) == 0 {
		return 0
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat[min(len(lat)-1, int(float64(len(lat))*p/100))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
