package web_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/shared/voucher"
)

type recordPage struct {
	Reservations []voucher.Record `json:"reservations"`
	NextCursor   *string          `json:"nextCursor"`
}

func records(l *ledgertest.Ledger, tb testing.TB, code, query string) recordPage {
	tb.Helper()
	r := l.Call(tb, http.MethodGet, "/admin/vouchers/"+code+"/reservations?"+query, nil)
	require.Equal(tb, http.StatusOK, r.Status, r.Raw)
	var p recordPage
	require.NoError(tb, json.Unmarshal([]byte(r.Raw), &p))
	return p
}

// TestReservationsListing checks GET /admin/vouchers/{code}/reservations: the
// records in creation order with their endings, the status and customer
// filters, and cursor paging.
func TestReservationsListing(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 100, 5, false))
	orders := []string{code + "-1", code + "-2", code + "-3", code + "-4"}
	for i, o := range orders {
		require.Equal(t, http.StatusCreated, l.Reserve(t, code, int64(1+i%2), o, 200_000).Status)
	}
	base := "/vouchers/" + code + "/reservations/"
	require.Equal(t, http.StatusOK, l.Call(t, http.MethodPost, base+orders[1]+"/confirm", nil).Status)
	require.Equal(t, http.StatusNoContent, l.Call(t, http.MethodDelete, base+orders[2], nil).Status)
	// A legacy row (no order amount) and a refunded one, as the table may hold them.
	l.Exec(t, `INSERT INTO voucher_redemption (voucher_code, customer_id, order_id, status, expires_at,
		order_amount, discount_amount, confirmed_at, released_at, release_reason)
		VALUES ($1::text, 3, $1::text || '-5', 'RESERVED', now() + interval '1 hour', NULL, 100000, NULL, NULL, NULL),
		       ($1::text, 1, $1::text || '-6', 'REFUNDED', now(), 300000, 100000, now(), now(), 'REFUNDED')`, code)

	all := records(l, t, code, "")
	require.Len(t, all.Reservations, 6)
	assert.Nil(t, all.NextCursor)
	status := func(rs []voucher.Record) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.OrderID[len(code)+1:]+":"+string(r.Status))
		}
		return out
	}
	assert.Equal(t, []string{"1:RESERVED", "2:CONFIRMED", "3:RELEASED", "4:RESERVED", "5:RESERVED", "6:REFUNDED"},
		status(all.Reservations))
	rs := all.Reservations
	assert.NotNil(t, rs[1].ConfirmedAt)
	assert.Nil(t, rs[0].ConfirmedAt)
	require.NotNil(t, rs[2].ReleaseReason)
	assert.Equal(t, voucher.ReasonCancelled, *rs[2].ReleaseReason)
	assert.NotNil(t, rs[2].ReleasedAt)
	assert.Nil(t, rs[4].OrderAmount, "a legacy row has no order amount")
	require.NotNil(t, rs[0].OrderAmount)
	assert.Equal(t, int64(200_000), *rs[0].OrderAmount)
	assert.Equal(t, int64(100_000), rs[0].DiscountAmount)
	var raw struct{ Reservations []map[string]any }
	r := l.Call(t, http.MethodGet, "/admin/vouchers/"+code+"/reservations?limit=1", nil)
	require.NoError(t, json.Unmarshal([]byte(r.Raw), &raw))
	for _, f := range []string{"orderId", "customerId", "status", "orderAmount", "discountAmount", "createdAt",
		"expiresAt", "confirmedAt", "releasedAt", "releaseReason"} {
		assert.Contains(t, raw.Reservations[0], f, "every field, null or not")
	}

	assert.Equal(t, []string{"1:RESERVED", "4:RESERVED", "5:RESERVED"}, status(records(l, t, code, "status=RESERVED").Reservations))
	assert.Equal(t, []string{"6:REFUNDED"}, status(records(l, t, code, "status=REFUNDED").Reservations))
	assert.Equal(t, []string{"1:RESERVED", "3:RELEASED", "6:REFUNDED"}, status(records(l, t, code, "customerId=1").Reservations))
	assert.Equal(t, []string{"3:RELEASED"}, status(records(l, t, code, "customerId=1&status=RELEASED").Reservations))
	assert.Empty(t, records(l, t, code, "customerId=99").Reservations)

	var paged []voucher.Record
	query := "limit=4"
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10)
		p := records(l, t, code, query)
		paged = append(paged, p.Reservations...)
		if p.NextCursor == nil {
			break
		}
		query = "limit=4&cursor=" + *p.NextCursor
	}
	assert.Equal(t, status(all.Reservations), status(paged))
	p := records(l, t, code, "limit=3&customerId=1")
	assert.Len(t, p.Reservations, 3)
	assert.Nil(t, p.NextCursor, "a last page that is full has no next cursor")
	p = records(l, t, code, "limit=2&customerId=1")
	require.NotNil(t, p.NextCursor)
	p = records(l, t, code, "limit=2&customerId=1&cursor="+*p.NextCursor)
	assert.Equal(t, []string{"6:REFUNDED"}, status(p.Reservations))
	assert.Nil(t, p.NextCursor)
}
