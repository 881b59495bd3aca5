package main

import (
	"context"
	"fmt"
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
// so that concurrent ones overlap. While writes holds a channel, each
// admitted write waits for it to close (counted in held).
type ledgerTap struct {
	URL                        string
	calls, lookups, peak, busy atomic.Int64
	writes                     atomic.Pointer[chan struct{}]
	held                       atomic.Int64
}

// holdWrites holds the admitted writes that come from now on until the
// returned release is called.
func (t *ledgerTap) holdWrites() (release func()) {
	ch := make(chan struct{})
	t.writes.Store(&ch)
	return func() {
		t.writes.Store(nil)
		close(ch)
	}
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
		if hold := t.writes.Load(); hold != nil && r.Method == http.MethodPost &&
			strings.HasPrefix(r.URL.Path, api.InternalPrefix+"/vouchers/") && strings.Contains(r.URL.Path, "/reservations") {
			t.held.Add(1)
			<-*hold
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
	require.Eventually(t, func() bool { return s.admit.Known(context.Background(), real) },
		5*time.Second, time.Millisecond, "the creation of %s reaches the proxy on the change channel", real)
	require.Equal(t, http.StatusCreated, s.reserve(t, real, 1, real+"-o1").Status)

	calls, scripts, unknown := tap.calls.Load(), s.gate.Calls(), int64(s.metric(t, "flashgate_proxy_unknown_code_total"))
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
	assert.Equal(t, int64(workers*each), int64(s.metric(t, "flashgate_proxy_unknown_code_total"))-unknown, "flashgate_proxy_unknown_code_total")
	assert.Equal(t, http.StatusCreated, s.reserve(t, real, 2, real+"-o2").Status)
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
	require.Eventually(t, func() bool { return s.metric(t, "flashgate_proxy_voucher_codes") > 0 }, 5*time.Second, time.Millisecond)
	// The start read the set at the clock's now: no re-read is due, only the channel can tell.
	reads := s.metric(t, "flashgate_proxy_voucher_codes_reads_total")
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
	assert.Equal(t, reads, s.metric(t, "flashgate_proxy_voucher_codes_reads_total"), "the set was not re-read")

	silent := newCode(t)
	_, err := s.pool.Exec(context.Background(), `INSERT INTO voucher (code, discount_amount, min_order_amount, total_limit,
		per_user_limit, starts_at, ends_at) VALUES ($1, 1000, 1000, 5, 1, now() - interval '1 hour', now() + interval '1 hour')`, silent)
	require.NoError(t, err)
	for i := range 3 {
		r := s.reserve(t, silent, 1, fmt.Sprintf("%s-o%d", silent, i))
		require.Equal(t, http.StatusNotFound, r.Status, r.Raw)
	}
	assert.Equal(t, reads, s.metric(t, "flashgate_proxy_voucher_codes_reads_total"), "no read within the interval")
	now.Add(int64(time.Minute))
	r := s.reserve(t, silent, 1, silent+"-o9")
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	assert.Equal(t, reads+1, s.metric(t, "flashgate_proxy_voucher_codes_reads_total"), "one read past the interval")
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
	assert.Positive(t, s.metric(t, "flashgate_proxy_ledger_lookups_refused_total"), "lookups refused over the budget")
	assert.Positive(t, unavailable.Load())
	assert.Equal(t, 0.0, s.metric(t, "flashgate_proxy_ledger_lookups"))
	retry.Range(func(k, v any) bool {
		cv := v.([2]any)
		r := s.reserve(t, cv[0].(string), cv[1].(int64), k.(string))
		assert.Equal(t, http.StatusCreated, r.Status, "retry of %s: %s", k, r.Raw)
		return true
	})
}
