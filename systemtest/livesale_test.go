package systemtest

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/voucher"
)

// The two operator changes of issue 12 made in the middle of a flash sale, a
// 20,000-request burst of distinct customers through a real proxy at the demo's
// 5,000 requests/s (4 s): raising the total limit, and pausing. Their figures
// are logged to be quoted.
const (
	saleRequests = 20_000
	saleRate     = 5_000
	saleWorkers  = 64
	saleMidAt    = 10_000 // the raise comes once this many requests were sent (2 s in)
	salePauseAt  = 8_000  // the pause a little earlier (1.6 s in), see TestPauseMidBurst
	saleAmount   = 5_000
)

// TestRaiseLimitMidBurst raises totalLimit from 1,000 to 1,500 once the first
// 1,000 are sold and the proxy's sold-out flag answers: the raise must sell the
// 500 new uses at once (it clears the flag through the change channel) and never
// one more, so exactly 1,500 are admitted, in Postgres and in Redis.
func TestRaiseLimitMidBurst(t *testing.T) {
	s := newStack(t, stackOptions{coalesce: true})
	code := newCode(t)
	s.createVoucher(t, code, 1_000, 1, true)

	var patchSent, patchDone time.Duration
	shots, elapsed := fire(t, burst{
		baseURL: s.ProxyURL, code: code, requests: saleRequests, workers: saleWorkers,
		rate: saleRate, orderAmount: saleAmount, midAt: saleMidAt,
		mid: func(since func() time.Duration) {
			patchSent = since()
			r := s.patchVoucher(t, code, map[string]any{"totalLimit": 1_500})
			patchDone = since()
			assert.EqualValues(t, 1_500, r.Body["totalLimit"], r.Raw)
		},
	})
	requireAnswered(t, shots)

	before := tallyOf(shots, func(sh shot) bool { return sh.answered < patchSent })
	after := tallyOf(shots, func(sh shot) bool { return sh.sent > patchDone })
	firstNew := time.Duration(-1)
	for _, sh := range shots {
		if sh.status == http.StatusCreated && sh.sent > patchDone && (firstNew < 0 || sh.answered < firstNew) {
			firstNew = sh.answered
		}
	}
	admitted := admittedOrders(code, shots)
	t.Logf("raise 1,000 -> 1,500 mid-burst: %d requests from %d goroutines in %v (%.0f req/s), p50 %s, p99 %s",
		len(shots), saleWorkers, elapsed.Round(time.Millisecond), float64(len(shots))/elapsed.Seconds(),
		ms(percentile(shots, 50)), ms(percentile(shots, 99)))
	t.Logf("PATCH sent at %v, returned after %s; answered before it: %v", patchSent.Round(time.Millisecond),
		ms(patchDone-patchSent), before)
	t.Logf("sent after the PATCH returned: %v; first new 201 answered %s after the PATCH returned",
		after, ms(firstNew-patchDone))
	t.Logf("all answers: %v", tallyOf(shots, nil))

	assert.Positive(t, before["409 "+voucher.CodeOutOfStock], "the first 1,000 were not sold out before the raise")
	require.Len(t, admitted, 1_500, "201s in all")
	require.Positive(t, after["201"], "no 201 for a request sent after the raise returned: the sold-out flag was not cleared")

	d := s.db(t, code)
	assert.Equal(t, dbState{Used: 1_500, Active: 1_500, MaxPerCustomer: 1, Remaining: 0}, d, "database")
	assert.Equal(t, admitted, s.activeOrders(t, code), "the database's active orders are the 201s")
	st, loaded, err := s.gate.State(context.Background(), code)
	require.NoError(t, err)
	require.True(t, loaded)
	assert.Zero(t, st.Remaining, "redis remaining")
	assert.Len(t, st.Orders, 1_500, "redis orders")
}

// TestPauseMidBurst pauses a flash voucher with plenty of stock in the middle of
// a burst: no request sent more than 1 s after the pause returned gets a 201 (they
// all get 422 NOT_ELIGIBLE reason PAUSED), and no reservation row is created after
// that moment. Until the pause every request is written to Postgres, so the
// workers may fall behind the schedule: the pause comes at 8,000 requests, to
// leave more than a second of the burst after its grace to judge.
func TestPauseMidBurst(t *testing.T) {
	s := newStack(t, stackOptions{coalesce: true})
	code := newCode(t)
	s.createVoucher(t, code, 100_000, 1, true)

	var pauseSent, pauseDone time.Duration
	var pausedAt time.Time // the wall clock when the pause returned, for the database's created_at
	shots, elapsed := fire(t, burst{
		baseURL: s.ProxyURL, code: code, requests: saleRequests, workers: saleWorkers,
		rate: saleRate, orderAmount: saleAmount, midAt: salePauseAt,
		mid: func(since func() time.Duration) {
			pauseSent = since()
			s.pauseVoucher(t, code, false)
			pauseDone, pausedAt = since(), time.Now()
		},
	})
	requireAnswered(t, shots)

	const grace = time.Second
	var late []int // requests sent more than grace after the pause returned, and admitted
	lastAdmitted := time.Duration(-1)
	for i, sh := range shots {
		if sh.status != http.StatusCreated {
			continue
		}
		lastAdmitted = max(lastAdmitted, sh.sent)
		if sh.sent > pauseDone+grace {
			late = append(late, i)
		}
	}
	admitted := admittedOrders(code, shots)
	afterGrace := tallyOf(shots, func(sh shot) bool { return sh.sent > pauseDone+grace })
	t.Logf("pause mid-burst: %d requests from %d goroutines in %v (%.0f req/s), p50 %s, p99 %s",
		len(shots), saleWorkers, elapsed.Round(time.Millisecond), float64(len(shots))/elapsed.Seconds(),
		ms(percentile(shots, 50)), ms(percentile(shots, 99)))
	t.Logf("pause sent at %v, returned after %s; 201s: %d, answered before the pause was sent: %d; "+
		"the last admitted request was sent at %v", pauseSent.Round(time.Millisecond), ms(pauseDone-pauseSent),
		len(admitted), tallyOf(shots, func(sh shot) bool { return sh.answered < pauseSent })["201"],
		lastAdmitted.Round(100*time.Microsecond))
	t.Logf("sent after the pause returned: %v", tallyOf(shots, func(sh shot) bool { return sh.sent > pauseDone }))
	t.Logf("sent more than 1 s after it: %v", afterGrace)

	require.Positive(t, sumOf(afterGrace), "no request was sent more than 1 s after the pause: nothing to judge")
	assert.Empty(t, late, "requests sent more than 1 s after the pause returned were admitted")
	assert.Positive(t, len(admitted), "no 201 before the pause")
	paused := "422 " + voucher.CodeNotEligible + "/" + voucher.ReasonPaused
	assert.Equal(t, afterGrace[paused], sumOf(afterGrace), "answers to requests sent 1 s after the pause")

	var rowsAfter int
	require.NoError(t, s.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM voucher_redemption WHERE voucher_code = $1 AND created_at > $2`,
		code, pausedAt.Add(grace)).Scan(&rowsAfter))
	assert.Zero(t, rowsAfter, "reservation rows created more than 1 s after the pause returned")
	assert.Equal(t, admitted, s.activeOrders(t, code), "the database's active orders are the 201s")
	d := s.db(t, code)
	assert.Equal(t, len(admitted), d.Used, "used_count")
	assert.EqualValues(t, d.Remaining, s.redisRemaining(t, code), "redis remaining = database remaining")
}

func sumOf(t tally) int {
	n := 0
	for _, v := range t {
		n += v
	}
	return n
}

// activeOrders returns the orderIds of code's reservations that hold a use.
func (s *stack) activeOrders(tb testing.TB, code string) map[string]bool {
	tb.Helper()
	rows, err := s.pool.Query(context.Background(),
		`SELECT order_id FROM voucher_redemption WHERE voucher_code = $1 AND status IN ('RESERVED','CONFIRMED')`, code)
	require.NoError(tb, err)
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		require.NoError(tb, rows.Scan(&id))
		out[id] = true
	}
	require.NoError(tb, rows.Err())
	return out
}
