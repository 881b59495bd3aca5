package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/voucher"
)

// row is one reservation's stored ending, read straight from the database.
type row struct {
	Status        string
	OrderAmount   *int64
	Discount      int64
	ConfirmedAt   *time.Time
	ReleasedAt    *time.Time
	ReleaseReason *string
}

func (l *testLedger) row(tb testing.TB, orderID string) row {
	tb.Helper()
	var r row
	err := l.pool.QueryRow(context.Background(), `
		SELECT status, order_amount, discount_amount, confirmed_at, released_at, release_reason
		FROM voucher_redemption WHERE order_id = $1`, orderID).
		Scan(&r.Status, &r.OrderAmount, &r.Discount, &r.ConfirmedAt, &r.ReleasedAt, &r.ReleaseReason)
	require.NoError(tb, err)
	return r
}

// reason is r's release reason, "" for none.
func (r row) reason() string {
	if r.ReleaseReason == nil {
		return ""
	}
	return *r.ReleaseReason
}

// subscribe listens on the change channel and returns the codes announced.
func subscribe(tb testing.TB, l *testLedger) <-chan string {
	tb.Helper()
	sub, ok := l.pub.(gate.Subscriber)
	require.True(tb, ok, "the test ledger's publisher is a redis client")
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	ps := sub.Subscribe(ctx, gate.ChangesChannel)
	_, err := ps.Receive(ctx) // the subscription is live before anything is published
	require.NoError(tb, err)
	tb.Cleanup(func() { ps.Close() })
	codes := make(chan string, 100)
	go func() {
		for m := range ps.Channel() {
			codes <- m.Payload
		}
	}()
	return codes
}

// announced waits for code on codes.
func announced(tb testing.TB, codes <-chan string, code string) {
	tb.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case c := <-codes:
			if c == code {
				return
			}
		case <-deadline:
			tb.Fatalf("no change of %s was published", code)
		}
	}
}

// A refund gives the use back to the voucher and the customer (Postgres and
// Redis), announces it, and is idempotent; only a confirmed reservation can be
// refunded; a refunded one cannot be confirmed, released is 204, and a retry
// of its reserve is RESERVATION_REFUNDED.
func TestRefund(t *testing.T) {
	t.Parallel()
	for _, flash := range []bool{false, true} {
		t.Run(fmt.Sprintf("flash=%v", flash), func(t *testing.T) {
			t.Parallel()
			l := newTestLedger(t, ledgerOptions{})
			code := newCode(t)
			l.createVoucher(t, spec(code, 1, 1, flash))
			changes := subscribe(t, l)
			res := "/vouchers/" + code + "/reservations"
			o := code + "-a"
			require.Equal(t, 201, l.call(t, "POST", res, claimBody(1, o, 150_000)).Status)

			r := l.call(t, "POST", res+"/"+o+"/refund", nil)
			assert.Equal(t, 409, r.Status, r.Raw)
			assert.Equal(t, voucher.CodeNotConfirmed, r.Code(), "refund of a reserved one")
			r = l.call(t, "POST", res+"/"+code+"-nope/refund", nil)
			assert.Equal(t, 404, r.Status, r.Raw)
			assert.Equal(t, voucher.CodeReservationNotFound, r.Code())

			require.Equal(t, 200, l.call(t, "POST", res+"/"+o+"/confirm", nil).Status)
			require.Equal(t, 409, l.call(t, "POST", res, claimBody(2, code+"-b", 150_000)).Status, "sold out")
			for i := 0; i < 2; i++ { // idempotent
				r = l.call(t, "POST", res+"/"+o+"/refund", nil)
				require.Equal(t, 200, r.Status, r.Raw)
				assert.JSONEq(t, fmt.Sprintf(`{"orderId":%q,"status":"REFUNDED","discountAmount":100000}`, o), r.Raw)
			}
			announced(t, changes, code)
			got := l.row(t, o)
			assert.Equal(t, "REFUNDED", got.Status)
			assert.Equal(t, voucher.ReasonRefunded, got.reason())
			assert.NotNil(t, got.ReleasedAt)
			assert.NotNil(t, got.ConfirmedAt)
			assert.Equal(t, dbCounts{Used: 0, Rows: 1, Active: 0}, l.counts(t, code))
			b := l.checkBooks(t, code)
			assert.Equal(t, 0, b.Usage[1], "the customer's use came back")
			if flash {
				checkRedisMatches(t, l.gate, b, code)
				assert.Contains(t, redisState(t, l.gate, code).Finished, o, "a refunded order is recorded finished")
			}

			for _, s := range []struct {
				method, path string
				body         any
				status       int
				code         string
			}{
				{"POST", res + "/" + o + "/confirm", nil, 409, voucher.CodeReservationRefunded},
				{"DELETE", res + "/" + o, nil, 204, ""},
				{"POST", res, claimBody(1, o, 150_000), 409, voucher.CodeReservationRefunded},
				{"GET", res + "/" + o, nil, 200, ""},
			} {
				r := l.call(t, s.method, s.path, s.body)
				assert.Equal(t, s.status, r.Status, "%s %s = %s", s.method, s.path, r.Raw)
				assert.Equal(t, s.code, r.Code(), "%s %s", s.method, s.path)
			}
			assert.Equal(t, "REFUNDED", l.row(t, o).Status, "release of a refunded one changes nothing")
			// The use is back: the customer and another can take it.
			r = l.call(t, "POST", res, claimBody(1, code+"-c", 150_000))
			assert.Equal(t, 201, r.Status, r.Raw)
			l.checkBooks(t, code)
		})
	}
}

// 50 concurrent refunds of one order give back exactly one use, and all
// answer 200.
func TestRefundConcurrent(t *testing.T) {
	t.Parallel()
	for _, flash := range []bool{false, true} {
		t.Run(fmt.Sprintf("flash=%v", flash), func(t *testing.T) {
			t.Parallel()
			l := newTestLedger(t, ledgerOptions{})
			code := newCode(t)
			l.createVoucher(t, spec(code, 3, 3, flash))
			res := "/vouchers/" + code + "/reservations"
			for i, o := range []string{"a", "b", "c"} {
				require.Equal(t, 201, l.call(t, "POST", res, claimBody(int64(1+i%2), code+"-"+o, 150_000)).Status)
				require.Equal(t, 200, l.call(t, "POST", res+"/"+code+"-"+o+"/confirm", nil).Status)
			}
			replies := make([]reply, 50)
			var wg sync.WaitGroup
			for i := range replies {
				wg.Add(1)
				go func() {
					defer wg.Done()
					replies[i] = l.call(t, "POST", res+"/"+code+"-a/refund", nil)
				}()
			}
			wg.Wait()
			for _, r := range replies {
				assert.Equal(t, 200, r.Status, r.Raw)
			}
			assert.Equal(t, dbCounts{Used: 2, Rows: 3, Active: 2, MaxPerCustomer: 1}, l.counts(t, code))
			b := l.checkBooks(t, code)
			assert.Equal(t, map[int64]int{1: 1, 2: 1}, b.Usage)
			if flash {
				checkRedisMatches(t, l.gate, b, code)
			}
		})
	}
}

// Confirm after DELETE is RESERVATION_RELEASED (final); after an expiry a late
// confirm still takes a use, and one that cannot names why. Each ending is
// stored with its reason and time.
func TestConfirmAfterEndings(t *testing.T) {
	t.Parallel()
	for _, flash := range []bool{false, true} {
		t.Run(fmt.Sprintf("flash=%v", flash), func(t *testing.T) {
			t.Parallel()
			l := newTestLedger(t, ledgerOptions{db: ownPostgres(t), ttl: 300 * time.Millisecond}) // sweeps take this test's rows only
			code := newCode(t)
			l.createVoucher(t, spec(code, 2, 1, flash))
			res := "/vouchers/" + code + "/reservations"
			cancelled, expired, other := code+"-cancel", code+"-exp", code+"-other"
			require.Equal(t, 201, l.call(t, "POST", res, claimBody(1, cancelled, 150_000)).Status)
			require.Equal(t, 204, l.call(t, "DELETE", res+"/"+cancelled, nil).Status)
			got := l.row(t, cancelled)
			assert.Equal(t, voucher.ReasonCancelled, got.reason())
			assert.NotNil(t, got.ReleasedAt)
			r := l.call(t, "POST", res+"/"+cancelled+"/confirm", nil)
			assert.Equal(t, 409, r.Status, r.Raw)
			assert.Equal(t, voucher.CodeReservationReleased, r.Code(), "an explicit release is final")

			require.Equal(t, 201, l.call(t, "POST", res, claimBody(2, expired, 150_000)).Status)
			time.Sleep(400 * time.Millisecond)
			_, err := l.jobs.Sweep(context.Background())
			require.NoError(t, err)
			got = l.row(t, expired)
			assert.Equal(t, "RELEASED", got.Status)
			assert.Equal(t, voucher.ReasonExpiredHold, got.reason())
			assert.NotNil(t, got.ReleasedAt)

			// Customer 2 holds a use again through another order: the late
			// payment meets the customer's limit.
			require.Equal(t, 201, l.call(t, "POST", res, claimBody(2, other, 150_000)).Status)
			r = l.call(t, "POST", res+"/"+expired+"/confirm", nil)
			assert.Equal(t, 409, r.Status, r.Raw)
			assert.Equal(t, voucher.CodeReservationExpired, r.Code())
			assert.Contains(t, r.Body["message"], "the customer's limit")
			require.Equal(t, 204, l.call(t, "DELETE", res+"/"+other, nil).Status)

			r = l.call(t, "POST", res+"/"+expired+"/confirm", nil)
			require.Equal(t, 200, r.Status, "a late payment after expiry still confirms: %s", r.Raw)
			assert.JSONEq(t, fmt.Sprintf(`{"orderId":%q,"status":"CONFIRMED","discountAmount":100000}`, expired), r.Raw)
			got = l.row(t, expired)
			assert.Equal(t, "CONFIRMED", got.Status)
			assert.NotNil(t, got.ConfirmedAt)
			assert.Nil(t, got.ReleasedAt)
			assert.Equal(t, "", got.reason())
			b := l.checkBooks(t, code)
			assert.Equal(t, 1, b.Used)
			if flash {
				checkRedisMatches(t, l.gate, b, code)
			}
		})
	}
}

// A late confirm that finds no use left says so.
func TestLateConfirmNoUseLeftMessage(t *testing.T) {
	t.Parallel()
	for _, flash := range []bool{false, true} {
		t.Run(fmt.Sprintf("flash=%v", flash), func(t *testing.T) {
			t.Parallel()
			l := newTestLedger(t, ledgerOptions{db: ownPostgres(t), ttl: 300 * time.Millisecond}) // sweeps take this test's rows only
			code := newCode(t)
			l.createVoucher(t, spec(code, 1, 1, flash))
			res := "/vouchers/" + code + "/reservations"
			require.Equal(t, 201, l.call(t, "POST", res, claimBody(1, code+"-a", 150_000)).Status)
			time.Sleep(400 * time.Millisecond)
			_, err := l.jobs.Sweep(context.Background())
			require.NoError(t, err)
			require.Equal(t, 201, l.call(t, "POST", res, claimBody(2, code+"-b", 150_000)).Status)
			r := l.call(t, "POST", res+"/"+code+"-a/confirm", nil)
			assert.Equal(t, 409, r.Status, r.Raw)
			assert.Equal(t, voucher.CodeReservationExpired, r.Code())
			assert.Contains(t, r.Body["message"], "no use left")
			b := l.checkBooks(t, code)
			assert.Equal(t, 1, b.Used)
			if flash {
				checkRedisMatches(t, l.gate, b, code)
			}
		})
	}
}

// Stock coming back through a DELETE or a sweep is announced on the change
// channel.
func TestStockBackIsPublished(t *testing.T) {
	t.Parallel()
	l := newTestLedger(t, ledgerOptions{db: ownPostgres(t), ttl: 300 * time.Millisecond}) // sweeps take this test's rows only
	changes := subscribe(t, l)
	released, swept := newCode(t), newCode(t)
	for _, code := range []string{released, swept} {
		l.createVoucher(t, spec(code, 5, 1, true))
		require.Equal(t, 201, l.call(t, "POST", "/vouchers/"+code+"/reservations", claimBody(1, code+"-a", 150_000)).Status)
	}
	require.Equal(t, 204, l.call(t, "DELETE", "/vouchers/"+released+"/reservations/"+released+"-a", nil).Status)
	announced(t, changes, released)
	time.Sleep(400 * time.Millisecond)
	_, err := l.jobs.Sweep(context.Background())
	require.NoError(t, err)
	announced(t, changes, swept)
	assert.Equal(t, http.StatusOK, l.call(t, "GET", "/vouchers/"+swept+"/reservations/"+swept+"-a", nil).Status)
}
