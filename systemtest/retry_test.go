package systemtest

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
	"github.com/flashgate/flashgate/shared/voucher"
)

// answer is what a client can tell of a reply: its status, its body and
// whether it says it replays an earlier answer.
type answer struct {
	Status   int
	Body     map[string]any
	Replayed string // the Idempotent-Replayed header
}

func answerOf(r httpxtest.Reply) answer {
	return answer{Status: r.Status, Body: r.Body, Replayed: r.Header.Get("Idempotent-Replayed")}
}

// code is the answer's error code, with NOT_ELIGIBLE's reason after a slash.
func (a answer) code() string {
	c, _ := a.Body["error"].(string)
	if r, _ := a.Body["reason"].(string); r != "" {
		return c + "/" + r
	}
	return c
}

// want is what a retry must be answered with, by the proxy and the ledger alike.
type want struct {
	status   int
	code     string         // "" for a success
	replayed bool           // Idempotent-Replayed: true
	body     map[string]any // when set, the whole body
}

// retryRig drives one voucher through the proxies and the ledger's public
// routes. proxy is the one the retries go to; other is a second proxy with its
// own sold-out flags.
type retryRig struct {
	s            *stack
	code         string
	proxy, other string
}

func (r retryRig) order(name string) string { return r.code + "-" + name }

// tokenFor is the token a base URL wants: the ledger's, or none at the proxies.
func (r retryRig) tokenFor(base string) string {
	if base == r.s.LedgerURL {
		return ledgerToken
	}
	return ""
}

func (r retryRig) reserve(tb testing.TB, base string, customer int64, order string, amount int64) answer {
	tb.Helper()
	return answerOf(call(tb, http.MethodPost, base+"/vouchers/"+r.code+"/reservations", r.tokenFor(base),
		map[string]any{"customerId": customer, "orderId": order, "orderAmount": amount}))
}

// act sends method to the reservation's path plus suffix ("", "/confirm", "/refund").
func (r retryRig) act(tb testing.TB, base, method, order, suffix string) answer {
	tb.Helper()
	return answerOf(call(tb, method, base+"/vouchers/"+r.code+"/reservations/"+order+suffix, r.tokenFor(base), nil))
}

// must checks one answer.
func must(tb testing.TB, what string, got answer, w want) {
	tb.Helper()
	assert.Equal(tb, w.status, got.Status, "%s: status (body %v)", what, got.Body)
	assert.Equal(tb, w.code, got.code(), "%s: error code", what)
	replayed := ""
	if w.replayed {
		replayed = "true"
	}
	assert.Equal(tb, replayed, got.Replayed, "%s: Idempotent-Replayed", what)
	if w.body != nil {
		assert.Equal(tb, w.body, got.Body, "%s: body", what)
	}
}

// same sends the same call to r.proxy and then to the ledger's public route, and
// checks that both answer it the same (status, body, replay header) and as w says.
func (r retryRig) same(tb testing.TB, what string, w want, do func(base string) answer) answer {
	tb.Helper()
	p := do(r.proxy)
	l := do(r.s.LedgerURL)
	assert.Equal(tb, p, l, "%s: the proxy's answer (first) and the ledger's differ", what)
	must(tb, what+" (proxy)", p, w)
	return p
}

// sameReserve is same for a reserve of order by customer.
func (r retryRig) sameReserve(tb testing.TB, what string, w want, customer int64, order string, amount int64) {
	tb.Helper()
	r.same(tb, what, w, func(base string) answer { return r.reserve(tb, base, customer, order, amount) })
}

// newOrders checks that a new order is answered the same by both: each service
// gets its own order and customer, as two clients would send them.
func (r retryRig) newOrders(tb testing.TB, what string, w want) {
	tb.Helper()
	n := int64(100)
	r.same(tb, what, w, func(base string) answer {
		n++
		return r.reserve(tb, base, n, r.order(fmt.Sprintf("new%d", n)), 5_000)
	})
}

var (
	created    = want{status: http.StatusCreated}
	replayedOK = want{status: http.StatusCreated, replayed: true}
)

func conflict(code string) want { return want{status: http.StatusConflict, code: code} }

func notEligible(reason string) want {
	return want{status: http.StatusUnprocessableEntity, code: voucher.CodeNotEligible + "/" + reason}
}

// retryCase puts a voucher (limit uses, one per customer) in some state and
// checks the retries the proxy and the ledger must answer alike.
type retryCase struct {
	name  string
	limit int
	run   func(t *testing.T, r retryRig)
}

// held reserves order a for customer 1 and returns its first answer's body.
func held(t *testing.T, r retryRig) map[string]any {
	t.Helper()
	first := r.reserve(t, r.proxy, 1, r.order("a"), 5_000)
	must(t, "first reserve", first, created)
	require.Equal(t, http.StatusCreated, first.Status)
	return first.Body
}

var retryCases = []retryCase{
	{name: "held order after the window ended", limit: 10, run: func(t *testing.T, r retryRig) {
		body := held(t, r)
		r.s.patchVoucher(t, r.code, map[string]any{"endsAt": time.Now().Add(-time.Minute).Format(time.RFC3339Nano)})
		r.sameReserve(t, "retry", want{status: 201, replayed: true, body: body}, 1, r.order("a"), 5_000)
		r.newOrders(t, "new order", notEligible(voucher.ReasonExpired))
	}},
	{name: "held order after a pause", limit: 10, run: func(t *testing.T, r retryRig) {
		body := held(t, r)
		r.s.pauseVoucher(t, r.code, false)
		r.sameReserve(t, "retry", want{status: 201, replayed: true, body: body}, 1, r.order("a"), 5_000)
		r.newOrders(t, "new order", notEligible(voucher.ReasonPaused))
		r.s.pauseVoucher(t, r.code, true)
		r.sameReserve(t, "retry after resume", replayedOK, 1, r.order("a"), 5_000)
	}},
	{name: "held order after sold out, the proxy's flag set", limit: 1, run: func(t *testing.T, r retryRig) {
		body := held(t, r)
		must(t, "reserve past the stock", r.reserve(t, r.proxy, 2, r.order("b"), 5_000), conflict(voucher.CodeOutOfStock))
		r.sameReserve(t, "retry", want{status: 201, replayed: true, body: body}, 1, r.order("a"), 5_000)
		r.sameReserve(t, "retry of the refused order", conflict(voucher.CodeOutOfStock), 2, r.order("b"), 5_000)
	}},
	{name: "order let in elsewhere while the proxy's flag is set", limit: 1, run: func(t *testing.T, r retryRig) {
		// The first proxy sells the use, sets its flag, gets the use back by a
		// release and sells it again; the proxy under test set its flag while
		// the first order held the use.
		first := r.reserve(t, r.other, 1, r.order("a"), 5_000)
		must(t, "first reserve, elsewhere", first, created)
		must(t, "reserve past the stock here", r.reserve(t, r.proxy, 2, r.order("b"), 5_000), conflict(voucher.CodeOutOfStock))
		must(t, "release elsewhere", r.act(t, r.other, http.MethodDelete, r.order("a"), ""), want{status: http.StatusNoContent})
		must(t, "reserve elsewhere", r.reserve(t, r.other, 3, r.order("c"), 5_000), created)
		r.sameReserve(t, "retry of the order let in elsewhere", replayedOK, 3, r.order("c"), 5_000)
		r.sameReserve(t, "retry of the released order", conflict(voucher.CodeReservationReleased), 1, r.order("a"), 5_000)
		must(t, "reserve past the stock here again", r.reserve(t, r.proxy, 4, r.order("d"), 5_000), conflict(voucher.CodeOutOfStock))
		r.sameReserve(t, "retry with the flag set again", replayedOK, 3, r.order("c"), 5_000)
		r.sameReserve(t, "retry of the released order, flag set", conflict(voucher.CodeReservationReleased), 1, r.order("a"), 5_000)
	}},
	{name: "released order", limit: 10, run: func(t *testing.T, r retryRig) {
		held(t, r)
		must(t, "release", r.act(t, r.proxy, http.MethodDelete, r.order("a"), ""), want{status: http.StatusNoContent})
		r.sameReserve(t, "retry", conflict(voucher.CodeReservationReleased), 1, r.order("a"), 5_000)
		r.same(t, "confirm after an explicit release", conflict(voucher.CodeReservationReleased), func(base string) answer {
			return r.act(t, base, http.MethodPost, r.order("a"), "/confirm")
		})
		r.same(t, "release again", want{status: http.StatusNoContent}, func(base string) answer {
			return r.act(t, base, http.MethodDelete, r.order("a"), "")
		})
	}},
	{name: "refunded order", limit: 10, run: func(t *testing.T, r retryRig) {
		held(t, r)
		r.same(t, "refund of a held order", conflict(voucher.CodeNotConfirmed), func(base string) answer {
			return r.act(t, base, http.MethodPost, r.order("a"), "/refund")
		})
		r.same(t, "refund of an unknown order", want{status: http.StatusNotFound, code: voucher.CodeReservationNotFound},
			func(base string) answer { return r.act(t, base, http.MethodPost, r.order("zz"), "/refund") })
		must(t, "confirm", r.act(t, r.proxy, http.MethodPost, r.order("a"), "/confirm"), want{status: http.StatusOK})
		refunded := want{status: http.StatusOK, body: map[string]any{
			"orderId": r.order("a"), "status": string(voucher.Refunded), "discountAmount": float64(5_000)}}
		must(t, "refund", r.act(t, r.proxy, http.MethodPost, r.order("a"), "/refund"), refunded)
		r.same(t, "refund again", refunded, func(base string) answer {
			return r.act(t, base, http.MethodPost, r.order("a"), "/refund")
		})
		r.sameReserve(t, "retry", conflict(voucher.CodeReservationRefunded), 1, r.order("a"), 5_000)
		r.same(t, "confirm", conflict(voucher.CodeReservationRefunded), func(base string) answer {
			return r.act(t, base, http.MethodPost, r.order("a"), "/confirm")
		})
		r.same(t, "release", want{status: http.StatusNoContent}, func(base string) answer {
			return r.act(t, base, http.MethodDelete, r.order("a"), "")
		})
		r.same(t, "read", want{status: http.StatusOK}, func(base string) answer {
			return r.act(t, base, http.MethodGet, r.order("a"), "")
		})
	}},
	{name: "amount changed", limit: 10, run: func(t *testing.T, r retryRig) {
		held(t, r)
		r.sameReserve(t, "retry with another amount", conflict(voucher.CodeOrderConflict), 1, r.order("a"), 6_000)
		r.sameReserve(t, "retry with the first amount", replayedOK, 1, r.order("a"), 5_000)
	}},
	{name: "customer changed", limit: 10, run: func(t *testing.T, r retryRig) {
		held(t, r)
		r.sameReserve(t, "retry by another customer", conflict(voucher.CodeOrderConflict), 2, r.order("a"), 5_000)
		r.sameReserve(t, "retry by the first customer", replayedOK, 1, r.order("a"), 5_000)
	}},
	{name: "dot-only orderId", limit: 10, run: func(t *testing.T, r retryRig) {
		r.sameReserve(t, "reserve", want{status: http.StatusBadRequest, code: voucher.CodeInvalidRequest}, 1, "..", 5_000)
	}},
}

// TestRetryAnsweredAlike sends the same retry to a proxy and to the ledger's
// public route, after the changes issue 12 names, and wants the same status,
// body and Idempotent-Replayed header from both: the order's own state is
// decided before eligibility, at both services, for flash and standard vouchers.
func TestRetryAnsweredAlike(t *testing.T) {
	s := newStack(t, stackOptions{coalesce: true})
	_, other := s.startProxy(t)
	for _, flash := range []bool{true, false} {
		kind := map[bool]string{true: "flash", false: "standard"}[flash]
		for _, c := range retryCases {
			t.Run(kind+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				r := retryRig{s: s, code: newCode(t), proxy: s.ProxyURL, other: other}
				s.createVoucher(t, r.code, c.limit, 1, flash)
				knownAt(t, r.code, other)
				c.run(t, r)
			})
		}
	}
}
