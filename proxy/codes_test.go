package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/voucher"
)

// ledgerTap stands between the proxy and the real ledger and counts the
// proxy's calls: all of them, and the voucher lookups (GET /admin/vouchers/:code),
// with the most of those in flight at once. A lookup is held for delay first,
// so that concurrent ones overlap.
type ledgerTap struct {
	URL                        string
	calls, lookups, peak, busy atomic.Int64
}

func newLedgerTap(tb testing.TB, ledgerURL string, delay time.Duration) *ledgerTap {
	tb.Helper()
	target, err := url.Parse(ledgerURL)
	require.NoError(tb, err)
	rp := httputil.NewSingleHostReverseProxy(target)
	t := &ledgerTap{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.calls.Add(1)
		if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, api.RouteVouchers+"/") {
			t.lookups.Add(1)
			n := t.busy.Add(1)
			for p := t.peak.Load(); n > p && !t.peak.CompareAndSwap(p, n); p = t.peak.Load() {
			}
			defer t.busy.Add(-1)
			time.Sleep(delay)
		}
		rp.ServeHTTP(w, r)
	}))
	tb.Cleanup(hs.Close)
	t.URL = hs.URL
	return t
}

// TestUnknownCodesAnsweredAtEdge: 64 goroutines reserving 3,200 random codes
// that were never created get 3,200 x 404 VOUCHER_NOT_FOUND from the proxy,
// with not one call to the ledger (so no Postgres work) and not one Redis
// script call, each counted in flashgate_proxy_unknown_code_total; a real
// voucher beside them still reserves.
func TestUnknownCodesAnsweredAtEdge(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{coalesce: true, codesRefresh: time.Hour, tap: true})
	tap := s.tap

	real := newCode(t)
	s.createVoucher(t, real, 10, 1, true)
	require.Eventually(t, func() bool { return s.admit.codes.Has(context.Background(), real) },
		5*time.Second, time.Millisecond, "the creation of %s reaches the proxy on the change channel", real)
	require.Equal(t, http.StatusCreated, s.reserve(t, real, 1, real+"-o1").Status)

	calls, scripts, unknown := tap.calls.Load(), s.gate.Calls(), s.admit.codes.unknown.Load()
	const workers, each = 64, 50
	var notFound atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				code := fmt.Sprintf("%sj%dx%d", real[:16], w, i)
				r := s.reserve(t, code, int64(w+1), code+"-o")
				if r.Status == http.StatusNotFound && strings.Contains(r.Raw, voucher.CodeVoucherNotFound) {
					notFound.Add(1)
				} else {
					t.Errorf("reserve %s = %d %s, want 404 %s", code, r.Status, r.Raw, voucher.CodeVoucherNotFound)
				}
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(workers*each), notFound.Load())
	assert.Equal(t, int64(0), tap.calls.Load()-calls, "calls to the ledger")
	assert.Equal(t, int64(0), s.gate.Calls()-scripts, "Redis script calls")
	assert.Equal(t, int64(workers*each), s.admit.codes.unknown.Load()-unknown, "flashgate_proxy_unknown_code_total")
	assert.Equal(t, http.StatusCreated, s.reserve(t, real, 2, real+"-o2").Status)
}

// TestVoucherCodesReadOncePerInterval: 200 goroutines missing the set at once
// make one read of it; misses within the interval make none (and are
// answered 404), the first miss past it makes exactly one; a code published
// while a read is under way is kept when the read's older result lands.
func TestVoucherCodesReadOncePerInterval(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	var reads atomic.Int64
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	codes := []string{"A"}
	var mu sync.Mutex
	load := func(context.Context) ([]string, error) {
		reads.Add(1)
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), codes...), nil
	}
	vc := newVoucherCodes(load, time.Second, time.Second, slog.New(slog.DiscardHandler))
	vc.now = func() time.Time { return time.Unix(0, now.Load()) }
	close(release)
	require.NoError(t, vc.Load(context.Background()))
	require.Equal(t, int64(1), reads.Load())

	miss := func(n int, code string) (found int64) {
		var wg sync.WaitGroup
		var hits atomic.Int64
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if vc.Has(context.Background(), code) {
					hits.Add(1)
				}
			}()
		}
		wg.Wait()
		return hits.Load()
	}
	mu.Lock()
	codes = append(codes, "B") // created, its publish lost
	mu.Unlock()
	assert.Equal(t, int64(0), miss(200, "B"), "within the interval B is unknown")
	assert.Equal(t, int64(1), reads.Load(), "reads within the interval")
	assert.Equal(t, int64(200), vc.unknown.Load())

	now.Add(int64(time.Second))
	assert.Equal(t, int64(200), miss(200, "B"), "past the interval the first miss re-reads and finds B")
	assert.Equal(t, int64(2), reads.Load(), "200 misses past the interval make one read")
	assert.Equal(t, int64(0), miss(200, "C"))
	assert.Equal(t, int64(2), reads.Load())
	assert.Equal(t, int64(200), miss(200, "A"), "known codes are found without a read")
	assert.Equal(t, int64(2), reads.Load())

	// A code published while a read runs survives the read's older result.
	release = make(chan struct{})
	select {
	case <-entered: // the earlier reads'
	default:
	}
	now.Add(int64(time.Second))
	done := make(chan bool)
	go func() { done <- vc.Has(context.Background(), "D") }()
	<-entered
	vc.Add("E")
	close(release)
	assert.False(t, <-done)
	assert.True(t, vc.Has(context.Background(), "E"), "E was published during the read")
	assert.Equal(t, 3, vc.Size()) // A, B, E
}

// TestCreatedVoucherReservable: a voucher created after the proxy read the
// set is reservable by a reserve sent right after its creation's 201 (the
// miss syncs with the change channel: 40 vouchers, 8 at once, each reserved
// the moment it is created, all 201 with no read of the set); one whose
// creation was never published (inserted in SQL here) answers 404 until the
// interval has passed (a clock the test moves), then the first reserve
// re-reads the set and gets its 201.
func TestCreatedVoucherReservable(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	s := newStack(t, stackOptions{coalesce: true, codesRefresh: time.Minute,
		codesClock: func() time.Time { return time.Unix(0, now.Load()) }})
	require.Eventually(t, func() bool { return s.admit.codes.Size() > 0 }, 5*time.Second, time.Millisecond)
	s.admit.codes.next.Store(now.Load() + int64(time.Minute)) // no re-read is due: only the channel can tell
	reads := s.admit.codes.loads.Load()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				announced := newCode(t)
				s.createVoucher(t, announced, 5, 1, true)
				r := s.reserve(t, announced, 1, announced+"-o1")
				// A loaded machine may answer a fault (503, retried with
				// the same orderId); never 404.
				for try := 0; r.Status == http.StatusServiceUnavailable && try < 20; try++ {
					time.Sleep(50 * time.Millisecond)
					r = s.reserve(t, announced, 1, announced+"-o1")
				}
				assert.Equal(t, http.StatusCreated, r.Status, "reserve %s right after its creation: %s", announced, r.Raw)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, reads, s.admit.codes.loads.Load(), "the set was not re-read")

	silent := newCode(t)
	_, err := s.pool.Exec(context.Background(), `INSERT INTO voucher (code, discount_amount, min_order_amount, total_limit,
		per_user_limit, starts_at, ends_at) VALUES ($1, 1000, 1000, 5, 1, now() - interval '1 hour', now() + interval '1 hour')`, silent)
	require.NoError(t, err)
	for i := range 3 {
		r := s.reserve(t, silent, 1, fmt.Sprintf("%s-o%d", silent, i))
		require.Equal(t, http.StatusNotFound, r.Status, r.Raw)
	}
	assert.Equal(t, reads, s.admit.codes.loads.Load(), "no read within the interval")
	now.Add(int64(time.Minute))
	r := s.reserve(t, silent, 1, silent+"-o9")
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	assert.Equal(t, reads+1, s.admit.codes.loads.Load(), "one read past the interval")
}

// TestLookupBudgetNeverExceeded: 30 standard vouchers (whose terms only the
// ledger has) reserved by 8 goroutines each at once, through a proxy with
// LEDGER_LOOKUPS=3 whose lookups the ledger takes 100ms to answer: the ledger
// never sees more than 3 lookups at once (exactly 3 at the peak), every
// request gets 201 or an immediate 503 UNAVAILABLE, the refusals are counted,
// and each refused one succeeds when tried again.
func TestLookupBudgetNeverExceeded(t *testing.T) {
	t.Parallel()
	const budget, vouchers, each = 3, 30, 8
	s := newStack(t, stackOptions{coalesce: true, codesRefresh: time.Hour, lookups: budget, tap: true, tapDelay: 100 * time.Millisecond})
	prefix := newCode(t)[:20]
	codes := make([]string, vouchers)
	for i := range codes {
		codes[i] = fmt.Sprintf("%sv%d", prefix, i)
		s.createVoucher(t, codes[i], each, 1, false)
	}
	require.NoError(t, s.admit.LoadCodes(context.Background())) // every code known, whatever the channel delivered

	var created, unavailable atomic.Int64
	var retry sync.Map
	var wg sync.WaitGroup
	for i, code := range codes {
		for c := range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				order := fmt.Sprintf("%s-c%d", code, c)
				r := s.reserve(t, code, int64(100*i+c+1), order)
				switch {
				case r.Status == http.StatusCreated:
					created.Add(1)
				case r.Status == http.StatusServiceUnavailable && strings.Contains(r.Raw, voucher.CodeUnavailable):
					unavailable.Add(1)
					retry.Store(order, [2]any{code, int64(100*i + c + 1)})
				default:
					t.Errorf("reserve %s = %d %s, want 201 or 503", order, r.Status, r.Raw)
				}
			}()
		}
	}
	wg.Wait()
	assert.Equal(t, int64(vouchers*each), created.Load()+unavailable.Load())
	assert.Equal(t, int64(budget), s.tap.peak.Load(), "most lookups at the ledger at once")
	assert.Positive(t, s.admit.lookups.refused.Load(), "lookups refused over the budget")
	assert.Positive(t, unavailable.Load())
	assert.Equal(t, int64(0), s.admit.lookups.inflight.Load())
	retry.Range(func(k, v any) bool {
		cv := v.([2]any)
		r := s.reserve(t, cv[0].(string), cv[1].(int64), k.(string))
		assert.Equal(t, http.StatusCreated, r.Status, "retry of %s: %s", k, r.Raw)
		return true
	})
}
