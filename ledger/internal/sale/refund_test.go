package sale_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
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

func rowOf(l *ledgertest.Ledger, tb testing.TB, orderID string) row {
	tb.Helper()
	var r row
	err := l.Pool.QueryRow(context.Background(), `
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

// A refund gives the use back to the voucher and the customer (Postgres and
// Redis), announces it, and is idempotent; only a confirmed reservation can be
// refunded; a refunded one cannot be confirmed, released is 204, and a retry
// of its reserve is RESERVATION_REFUNDED.
func TestRefund(t *testing.T) {
	t.Parallel()
	for _, flash := range []bool{false, true} {
		t.Run(fmt.Sprintf("flash=%v", flash), func(t *testing.T) {
			t.Parallel()
			l := ledgertest.New(t, ledgertest.Options{})
			code := ledgertest.NewCode(t)
			l.CreateVoucher(t, ledgertest.Spec(code, 1, 1, flash))
			changes := ledgertest.Subscribe(t, l)
			res := "/vouchers/" + code + "/reservations"
			o := code + "-a"
			require.Equal(t, 201, l.Call(t, "POST", res, ledgertest.ClaimBody(1, o, 150_000)).Status)

			r := l.Call(t, "POST", res+"/"+o+"/refund", nil)
			assert.Equal(t, 409, r.Status, r.Raw)
			assert.Equal(t, voucher.CodeNotConfirmed, r.Code(), "refund of a reserved one")
			r = l.Call(t, "POST", res+"/"+code+"-nope/refund", nil)
			assert.Equal(t, 404, r.Status, r.Raw)
			assert.Equal(t, voucher.CodeReservationNotFound, r.Code())

			require.Equal(t, 200, l.Call(t, "POST", res+"/"+o+"/confirm", nil).Status)
			require.Equal(t, 409, l.Call(t, "POST", res, ledgertest.ClaimBody(2, code+"-b", 150_000)).Status, "sold out")
			for i := 0; i < 2; i++ { // idempotent
				r = l.Call(t, "POST", res+"/"+o+"/refund", nil)
				require.Equal(t, 200, r.Status, r.Raw)
				assert.JSONEq(t, fmt.Sprintf(`{"orderId":%q,"status":"REFUNDED","discountAmount":100000}`, o), r.Raw)
			}
			ledgertest.Announced(t, changes, code)
			got := rowOf(l, t, o)
			assert.Equal(t, "REFUNDED", got.Status)
			assert.Equal(t, voucher.ReasonRefunded, got.reason())
			assert.NotNil(t, got.ReleasedAt)
			assert.NotNil(t, got.ConfirmedAt)
			assert.Equal(t, ledgertest.DBCounts{Used: 0, Rows: 1, Active: 0}, l.Counts(t, code))
			b := l.CheckBooks(t, code)
			assert.Equal(t, 0, b.Usage[1], "the customer's use came back")
			if flash {
				ledgertest.CheckRedisMatches(t, l.Gate, b, code)
				assert.Contains(t, ledgertest.RedisState(t, l.Gate, code).Finished, o, "a refunded order is recorded finished")
			}

			for _, s := range []struct {
				method, path string
				body         any
				status       int
				code         string
			}{
				{"POST", res + "/" + o + "/confirm", nil, 409, voucher.CodeReservationRefunded},
				{"DELETE", res + "/" + o, nil, 204, ""},
				{"POST", res, ledgertest.ClaimBody(1, o, 150_000), 409, voucher.CodeReservationRefunded},
				{"GET", res + "/" + o, nil, 200, ""},
			} {
				r := l.Call(t, s.method, s.path, s.body)
				assert.Equal(t, s.status, r.Status, "%s %s = %s", s.method, s.path, r.Raw)
				assert.Equal(t, s.code, r.Code(), "%s %s", s.method, s.path)
			}
			assert.Equal(t, "REFUNDED", rowOf(l, t, o).Status, "release of a refunded one changes nothing")
			// The use is back: the customer and another can take it.
			r = l.Call(t, "POST", res, ledgertest.ClaimBody(1, code+"-c", 150_000))
			assert.Equal(t, 201, r.Status, r.Raw)
			l.CheckBooks(t, code)
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
			l := ledgertest.New(t, ledgertest.Options{})
			code := ledgertest.NewCode(t)
			l.CreateVoucher(t, ledgertest.Spec(code, 3, 3, flash))
			res := "/vouchers/" + code + "/reservations"
			for i, o := range []string{"a", "b", "c"} {
				require.Equal(t, 201, l.Call(t, "POST", res, ledgertest.ClaimBody(int64(1+i%2), code+"-"+o, 150_000)).Status)
				require.Equal(t, 200, l.Call(t, "POST", res+"/"+code+"-"+o+"/confirm", nil).Status)
			}
			replies := make([]ledgertest.Reply, 50)
			var wg sync.WaitGroup
			for i := range replies {
				wg.Add(1)
				go func() {
					defer wg.Done()
					replies[i] = l.Call(t, "POST", res+"/"+code+"-a/refund", nil)
				}()
			}
			wg.Wait()
			for _, r := range replies {
				assert.Equal(t, 200, r.Status, r.Raw)
			}
			assert.Equal(t, ledgertest.DBCounts{Used: 2, Rows: 3, Active: 2, MaxPerCustomer: 1}, l.Counts(t, code))
			b := l.CheckBooks(t, code)
			assert.Equal(t, map[int64]int{1: 1, 2: 1}, b.Usage)
			if flash {
				ledgertest.CheckRedisMatches(t, l.Gate, b, code)
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
			l := ledgertest.New(t, ledgertest.Options{DB: ledgertest.OwnPostgres(t), TTL: 300 * time.Millisecond}) // sweeps take this test's rows only
			code := ledgertest.NewCode(t)
			l.CreateVoucher(t, ledgertest.Spec(code, 2, 1, flash))
			res := "/vouchers/" + code + "/reservations"
			cancelled, expired, other := code+"-cancel", code+"-exp", code+"-other"
			require.Equal(t, 201, l.Call(t, "POST", res, ledgertest.ClaimBody(1, cancelled, 150_000)).Status)
			require.Equal(t, 204, l.Call(t, "DELETE", res+"/"+cancelled, nil).Status)
			got := rowOf(l, t, cancelled)
			assert.Equal(t, voucher.ReasonCancelled, got.reason())
			assert.NotNil(t, got.ReleasedAt)
			r := l.Call(t, "POST", res+"/"+cancelled+"/confirm", nil)
			assert.Equal(t, 409, r.Status, r.Raw)
			assert.Equal(t, voucher.CodeReservationReleased, r.Code(), "an explicit release is final")

			require.Equal(t, 201, l.Call(t, "POST", res, ledgertest.ClaimBody(2, expired, 150_000)).Status)
			time.Sleep(400 * time.Millisecond)
			_, err := l.Jobs.Sweep(context.Background())
			require.NoError(t, err)
			got = rowOf(l, t, expired)
			assert.Equal(t, "RELEASED", got.Status)
			assert.Equal(t, voucher.ReasonExpiredHold, got.reason())
			assert.NotNil(t, got.ReleasedAt)

			// Customer 2 holds a use again through another order: the late
			// payment meets the customer's limit.
			require.Equal(t, 201, l.Call(t, "POST", res, ledgertest.ClaimBody(2, other, 150_000)).Status)
			r = l.Call(t, "POST", res+"/"+expired+"/confirm", nil)
			assert.Equal(t, 409, r.Status, r.Raw)
			assert.Equal(t, voucher.CodeReservationExpired, r.Code())
			assert.Contains(t, r.Body["message"], "the customer's limit")
			require.Equal(t, 204, l.Call(t, "DELETE", res+"/"+other, nil).Status)

			r = l.Call(t, "POST", res+"/"+expired+"/confirm", nil)
			require.Equal(t, 200, r.Status, "a late payment after expiry still confirms: %s", r.Raw)
			assert.JSONEq(t, fmt.Sprintf(`{"orderId":%q,"status":"CONFIRMED","discountAmount":100000}`, expired), r.Raw)
			got = rowOf(l, t, expired)
			assert.Equal(t, "CONFIRMED", got.Status)
			assert.NotNil(t, got.ConfirmedAt)
			assert.Nil(t, got.ReleasedAt)
			assert.Equal(t, "", got.reason())
			b := l.CheckBooks(t, code)
			assert.Equal(t, 1, b.Used)
			if flash {
				ledgertest.CheckRedisMatches(t, l.Gate, b, code)
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
			l := ledgertest.New(t, ledgertest.Options{DB: ledgertest.OwnPostgres(t), TTL: 300 * time.Millisecond}) // sweeps take this test's rows only
			code := ledgertest.NewCode(t)
			l.CreateVoucher(t, ledgertest.Spec(code, 1, 1, flash))
			res := "/vouchers/" + code + "/reservations"
			require.Equal(t, 201, l.Call(t, "POST", res, ledgertest.ClaimBody(1, code+"-a", 150_000)).Status)
			time.Sleep(400 * time.Millisecond)
			_, err := l.Jobs.Sweep(context.Background())
			require.NoError(t, err)
			require.Equal(t, 201, l.Call(t, "POST", res, ledgertest.ClaimBody(2, code+"-b", 150_000)).Status)
			r := l.Call(t, "POST", res+"/"+code+"-a/confirm", nil)
			assert.Equal(t, 409, r.Status, r.Raw)
			assert.Equal(t, voucher.CodeReservationExpired, r.Code())
			assert.Contains(t, r.Body["message"], "no use left")
			b := l.CheckBooks(t, code)
			assert.Equal(t, 1, b.Used)
			if flash {
				ledgertest.CheckRedisMatches(t, l.Gate, b, code)
			}
		})
	}
}

// Stock coming back through a DELETE or a sweep is announced on the change
// channel.
func TestStockBackIsPublished(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{DB: ledgertest.OwnPostgres(t), TTL: 300 * time.Millisecond}) // sweeps take this test's rows only
	changes := ledgertest.Subscribe(t, l)
	released, swept := ledgertest.NewCode(t), ledgertest.NewCode(t)
	for _, code := range []string{released, swept} {
		l.CreateVoucher(t, ledgertest.Spec(code, 5, 1, true))
		require.Equal(t, 201, l.Call(t, "POST", "/vouchers/"+code+"/reservations", ledgertest.ClaimBody(1, code+"-a", 150_000)).Status)
	}
	require.Equal(t, 204, l.Call(t, "DELETE", "/vouchers/"+released+"/reservations/"+released+"-a", nil).Status)
	ledgertest.Announced(t, changes, released)
	time.Sleep(400 * time.Millisecond)
	_, err := l.Jobs.Sweep(context.Background())
	require.NoError(t, err)
	ledgertest.Announced(t, changes, swept)
	assert.Equal(t, http.StatusOK, l.Call(t, "GET", "/vouchers/"+swept+"/reservations/"+swept+"-a", nil).Status)
}
