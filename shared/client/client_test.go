package client_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/checkout"
	"github.com/flashgate/flashgate/shared/client"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
	"github.com/flashgate/flashgate/shared/voucher"
)

// validated returns a client of base whose every response is checked against
// openapi.yaml by kin-openapi (status, headers, body), and the checker.
func validated(t *testing.T, base, token string) (*client.Client, *httpxtest.SpecChecker) {
	t.Helper()
	spec := httpxtest.NewSpecChecker(t, base)
	h := &http.Client{Timeout: 10 * time.Second, Transport: spec.Transport(nil)}
	return client.New(base, client.WithToken(token), client.WithHTTPClient(h)), spec
}

func newVoucher(t *testing.T, admin *client.Client, total, perUser int, flash bool) string {
	t.Helper()
	code := httpxtest.NewCode(t, 16)
	start, end := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	discount, min := int64(100_000), int64(1_000)
	_, err := admin.CreateVoucher(t.Context(), voucher.NewVoucher{Code: &code, DiscountAmount: &discount, MinOrderAmount: &min,
		TotalLimit: &total, PerUserLimit: &perUser, StartsAt: &start, EndsAt: &end, FlashSale: &flash})
	require.NoError(t, err)
	if flash {
		requireAgreementAtEnd(t, code)
	}
	return code
}

// TestReservationRoutes drives every public route through the client against
// the proxy and the ledger alike, for a flash and a standard voucher, and
// validates each live answer against openapi.yaml: every error is a
// *voucher.Error with the documented code.
func TestReservationRoutes(t *testing.T) {
	admin, _ := validated(t, stack.LedgerURL, ledgerToken)
	for _, svc := range []struct{ name, base, token string }{
		{"proxy", stack.ProxyURL, proxyToken}, {"ledger", stack.LedgerURL, ledgerToken},
	} {
		for _, flash := range []bool{true, false} {
			t.Run(svc.name+map[bool]string{true: "/flash", false: "/standard"}[flash], func(t *testing.T) {
				t.Parallel()
				c, spec := validated(t, svc.base, svc.token)
				code := newVoucher(t, admin, 2, 1, flash)
				checkReservationRoutes(t, c, code)
				assert.GreaterOrEqual(t, len(spec.Checked()), 10, "responses validated: %v", spec.Checked())
			})
		}
	}
}

func checkReservationRoutes(t *testing.T, c *client.Client, code string) {
	ctx := t.Context()
	a := voucher.Claim{CustomerID: 1, OrderID: code + "-a", OrderAmount: 50_000}
	r, err := c.Reserve(ctx, code, a)
	require.NoError(t, err)
	assert.Equal(t, api.Receipt{OrderID: a.OrderID, DiscountAmount: 50_000,
		Location: "/vouchers/" + code + "/reservations/" + a.OrderID}, r)
	r, err = c.Reserve(ctx, code, a)
	require.NoError(t, err)
	assert.True(t, r.Replayed, "a retry of the same order is a replay")

	wantCode := func(err error, code, reason string) {
		t.Helper()
		var e *voucher.Error
		if assert.ErrorAs(t, err, &e) {
			assert.Equal(t, code, e.Code, "%v", err)
			assert.Equal(t, reason, e.Reason)
			assert.NotEmpty(t, e.Message)
		}
	}
	_, err = c.Reserve(ctx, code, voucher.Claim{CustomerID: 1, OrderID: code + "-b", OrderAmount: 50_000})
	wantCode(err, voucher.CodeAlreadyUsed, "")
	_, err = c.Reserve(ctx, code, voucher.Claim{CustomerID: 2, OrderID: a.OrderID, OrderAmount: 50_000})
	wantCode(err, voucher.CodeOrderConflict, "")
	_, err = c.Reserve(ctx, code, voucher.Claim{CustomerID: 3, OrderID: code + "-c", OrderAmount: 10})
	wantCode(err, voucher.CodeNotEligible, voucher.ReasonOrderTooSmall)
	_, err = c.Reserve(ctx, code, voucher.Claim{CustomerID: 3, OrderID: code + "-c", OrderAmount: 50_000})
	require.NoError(t, err)
	_, err = c.Reserve(ctx, code, voucher.Claim{CustomerID: 4, OrderID: code + "-d", OrderAmount: 50_000})
	wantCode(err, voucher.CodeOutOfStock, "")
	_, err = c.Reserve(ctx, "NOPE-"+code, a)
	wantCode(err, voucher.CodeVoucherNotFound, "")
	_, err = c.Reserve(ctx, code, voucher.Claim{CustomerID: 0, OrderID: "x", OrderAmount: 1})
	wantCode(err, voucher.CodeInvalidRequest, "")

	got, err := c.Get(ctx, code, a.OrderID)
	require.NoError(t, err)
	assert.Equal(t, voucher.Reserved, got.Status)
	assert.Equal(t, int64(1), got.CustomerID)
	_, err = c.Get(ctx, code, "nobody")
	wantCode(err, voucher.CodeReservationNotFound, "")

	s, err := c.Confirm(ctx, code, a.OrderID)
	require.NoError(t, err)
	assert.Equal(t, api.Confirmation{OrderID: a.OrderID, Status: voucher.Confirmed, DiscountAmount: 50_000}, s)
	wantCode(c.Release(ctx, code, a.OrderID), voucher.CodeAlreadyConfirmed, "")
	_, err = c.Refund(ctx, code, code+"-c")
	wantCode(err, voucher.CodeNotConfirmed, "")
	s, err = c.Refund(ctx, code, a.OrderID)
	require.NoError(t, err)
	assert.Equal(t, voucher.Refunded, s.Status)
	_, err = c.Confirm(ctx, code, a.OrderID)
	wantCode(err, voucher.CodeReservationRefunded, "")
	require.NoError(t, c.Release(ctx, code, code+"-c"))
	require.NoError(t, c.Release(ctx, code, code+"-c"), "a second release is 204 again")
	_, err = c.Confirm(ctx, code, code+"-c")
	wantCode(err, voucher.CodeReservationReleased, "")
}

// TestUnauthorized checks that a missing token is a *voucher.Error UNAUTHORIZED
// on both services, answered with WWW-Authenticate: Bearer (the spec checker
// validates the header).
func TestUnauthorized(t *testing.T) {
	for _, base := range []string{stack.ProxyURL, stack.LedgerURL} {
		c, spec := validated(t, base, "wrong")
		_, err := c.Get(t.Context(), "ANY", "order")
		assert.Equal(t, voucher.CodeUnauthorized, voucher.ErrorCode(err), "%s: %v", base, err)
		assert.Equal(t, 1, spec.Checked()["GET /vouchers/{code}/reservations/{orderId} Unauthorized"])
		req, _ := http.NewRequest(http.MethodGet, base+"/vouchers/ANY/reservations/order", nil)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, "Bearer", resp.Header.Get("WWW-Authenticate"))
	}
}

// TestAdminRoutes drives every admin call through the client against the
// ledger, each answer validated against openapi.yaml.
func TestAdminRoutes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	admin, spec := validated(t, stack.LedgerURL, ledgerToken)
	code := newVoucher(t, admin, 5, 2, true)
	_, err := admin.CreateVoucher(ctx, voucher.NewVoucher{Code: &code})
	assert.Equal(t, voucher.CodeInvalidRequest, voucher.ErrorCode(err), "%v", err)
	v, err := admin.Voucher(ctx, code)
	require.NoError(t, err)
	assert.Equal(t, 5, v.Remaining)
	_, err = admin.Voucher(ctx, "NOPE-"+code)
	assert.Equal(t, voucher.CodeVoucherNotFound, voucher.ErrorCode(err))

	flash := true
	page, err := admin.ListVouchers(ctx, client.VoucherQuery{State: "live", FlashSale: &flash, Limit: 500})
	require.NoError(t, err)
	assert.NotEmpty(t, page.Vouchers)

	shop := client.New(stack.LedgerURL, client.WithToken(ledgerToken))
	_, err = shop.Reserve(ctx, code, voucher.Claim{CustomerID: 9, OrderID: code + "-1", OrderAmount: 5_000})
	require.NoError(t, err)
	limit := 0
	_, err = admin.UpdateVoucher(ctx, code, voucher.VoucherPatch{TotalLimit: &limit})
	assert.Equal(t, voucher.CodeLimitBelowUsed, voucher.ErrorCode(err), "%v", err)
	limit = 3
	v, err = admin.UpdateVoucher(ctx, code, voucher.VoucherPatch{TotalLimit: &limit})
	require.NoError(t, err)
	assert.Equal(t, 2, v.Remaining)

	v, err = admin.Pause(ctx, code)
	require.NoError(t, err)
	assert.True(t, v.Paused)
	_, err = shop.Reserve(ctx, code, voucher.Claim{CustomerID: 9, OrderID: code + "-2", OrderAmount: 5_000})
	assert.Equal(t, voucher.CodeNotEligible, voucher.ErrorCode(err))
	v, err = admin.Resume(ctx, code)
	require.NoError(t, err)
	assert.False(t, v.Paused)

	require.NoError(t, admin.Warmup(ctx, code))
	rep, err := admin.Reconcile(ctx, code)
	require.NoError(t, err)
	assert.Equal(t, api.ReconcileReport{Code: code, DBRemaining: 2, RedisRemaining: 2, RedisRemainingAfter: 2}, rep)

	recs, err := admin.Reservations(ctx, code, client.RecordQuery{Status: voucher.Reserved, CustomerID: 9, Limit: 10})
	require.NoError(t, err)
	require.Len(t, recs.Reservations, 1)
	assert.Nil(t, recs.NextCursor)
	var csv bytes.Buffer
	require.NoError(t, admin.ExportReservations(ctx, code, &csv))
	assert.Equal(t, 2, strings.Count(csv.String(), "\n"), "a header and one row:\n%s", csv.String())
	events, err := admin.Audit(ctx, code)
	require.NoError(t, err)
	var actions []string
	for _, e := range events {
		actions = append(actions, e.Action)
	}
	// A reconcile that found nothing to fix leaves no event.
	assert.Equal(t, []string{"create", "update", "pause", "resume", "warmup"}, actions)
	assert.GreaterOrEqual(t, len(spec.Checked()), 10, "%v", spec.Checked())
}

// TestRetryHonoursRetryAfter checks the retry contract on a server that
// answers 503 then 429 RATE_LIMITED, each with Retry-After: 1, then 201: the
// same body, the same X-Request-ID on each attempt, at least the second asked
// for between them (the client adds its own jitter, up to half again); and that a
// deadline shorter than the wait gives up at once with UNAVAILABLE.
func TestRetryHonoursRetryAfter(t *testing.T) {
	var mu sync.Mutex
	var ids, bodies []string
	var at []time.Time
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b bytes.Buffer
		b.ReadFrom(r.Body)
		mu.Lock()
		ids, bodies, at = append(ids, r.Header.Get("X-Request-ID")), append(bodies, b.String()), append(at, time.Now())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch n.Add(1) {
		case 1:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error":"UNAVAILABLE","message":"temporarily unavailable, retry with the same orderId"}`))
			return
		case 2:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(`{"error":"RATE_LIMITED","message":"too many reserves"}`))
			return
		}
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"orderId":"o1","discountAmount":7}`))
	}))
	t.Cleanup(srv.Close)

	c := client.New(srv.URL)
	ctx, cancel := context.WithTimeout(client.WithRequestID(t.Context(), "req-42"), 10*time.Second)
	defer cancel()
	r, err := c.Reserve(ctx, "V1", voucher.Claim{CustomerID: 1, OrderID: "o1", OrderAmount: 9})
	require.NoError(t, err)
	assert.Equal(t, int64(7), r.DiscountAmount)
	assert.Equal(t, []string{"req-42", "req-42", "req-42"}, ids)
	assert.Equal(t, bodies[0], bodies[2], "the retry sends the same orderId")
	assert.Contains(t, bodies[0], `"orderId":"o1"`)
	for i := 1; i < len(at); i++ {
		assert.GreaterOrEqual(t, at[i].Sub(at[i-1]), time.Second, "Retry-After: 1 honoured")
	}

	n.Store(0)
	ctx, cancel = context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Reserve(ctx, "V1", voucher.Claim{CustomerID: 1, OrderID: "o1", OrderAmount: 9})
	assert.Equal(t, voucher.CodeUnavailable, voucher.ErrorCode(err), "%v", err)
	assert.Less(t, time.Since(start), 450*time.Millisecond, "no wait past the deadline")
}

// TestRetryAcrossLedgerRestart kills the real ledger and starts it again a
// second later: a reserve through the proxy meanwhile gets 503s and is
// retried with the same orderId until it is answered 201, once.
func TestRetryAcrossLedgerRestart(t *testing.T) {
	admin := client.New(stack.LedgerURL, client.WithToken(ledgerToken))
	code := newVoucher(t, admin, 1, 1, false) // standard: the proxy needs the ledger for it
	shop := client.New(stack.ProxyURL, client.WithToken(proxyToken))
	require.NoError(t, stack.Ledger.Kill())
	restarted := make(chan error, 1)
	go func() {
		time.Sleep(time.Second)
		restarted <- stack.Ledger.Restart()
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	claim := voucher.Claim{CustomerID: 5, OrderID: code + "-o", OrderAmount: 5_000}
	r, err := shop.Reserve(ctx, code, claim)
	require.NoError(t, <-restarted)
	require.NoError(t, err)
	assert.Equal(t, claim.OrderID, r.OrderID)
	v, err := admin.Voucher(ctx, code)
	require.NoError(t, err)
	assert.Equal(t, 1, v.UsedCount, "one use, however many attempts")
}

// TestCheckoutTokenHeader: a context from WithCheckoutToken sends the token
// a shop minted as X-Checkout-Token; a context without one sends none.
func TestCheckoutTokenHeader(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get(api.HeaderCheckoutToken))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"orderId":"o1","discountAmount":7}`))
	}))
	t.Cleanup(srv.Close)
	keys, err := checkout.ParseKeys("k1:a-shared-secret-of-the-shop")
	require.NoError(t, err)
	token := keys.Mint("V1", 1, time.Now().Add(3*time.Minute))

	c := client.New(srv.URL)
	_, err = c.Reserve(client.WithCheckoutToken(t.Context(), token), "V1", voucher.Claim{CustomerID: 1, OrderID: "o1", OrderAmount: 9})
	require.NoError(t, err)
	_, err = c.Reserve(t.Context(), "V1", voucher.Claim{CustomerID: 1, OrderID: "o2", OrderAmount: 9})
	require.NoError(t, err)
	assert.Equal(t, []string{token, ""}, got)
}
