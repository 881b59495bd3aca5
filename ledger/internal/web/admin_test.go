package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/ledger/internal/web"
	"github.com/flashgate/flashgate/shared/voucher"
)

// TestVoucherView checks the view's paused, state (by the database clock) and
// refundedCount.
func TestVoucherView(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	now := time.Now()
	for _, tt := range []struct {
		name       string
		start, end time.Time
		state      string
	}{
		{"scheduled", now.Add(time.Hour), now.Add(2 * time.Hour), voucher.StateScheduled},
		{"live", now.Add(-time.Hour), now.Add(time.Hour), voucher.StateLive},
		{"ended", now.Add(-2 * time.Hour), now.Add(-time.Hour), voucher.StateEnded},
	} {
		code := ledgertest.NewCode(t)
		s := ledgertest.Spec(code, 10, 1, false)
		s.StartsAt, s.EndsAt = tt.start, tt.end
		l.CreateVoucher(t, s)
		v := ledgertest.View(t, l.Call(t, http.MethodGet, "/admin/vouchers/"+code, nil), http.StatusOK)
		assert.Equal(t, tt.state, v.State, tt.name)
		assert.False(t, v.Paused, tt.name)
	}

	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 10, 1, false))
	require.Equal(t, http.StatusCreated, l.Reserve(t, code, 1, code+"-a", 200_000).Status)
	l.Exec(t, `INSERT INTO voucher_redemption (voucher_code, customer_id, order_id, status, expires_at,
		order_amount, discount_amount, confirmed_at, released_at, release_reason)
		VALUES ($1::text, 2, $1::text || '-r', 'REFUNDED', now(), 5000, 5000, now(), now(), 'REFUNDED')`, code)
	v := ledgertest.View(t, l.Call(t, http.MethodGet, "/admin/vouchers/"+code, nil), http.StatusOK)
	assert.Equal(t, 1, v.RefundedCount)
	assert.Equal(t, 1, v.ReservedCount)

	v = ledgertest.View(t, l.Call(t, http.MethodPost, "/admin/vouchers/"+code+"/pause", nil), http.StatusOK)
	assert.True(t, v.Paused)
	assert.Equal(t, voucher.StatePaused, v.State)
	assert.Equal(t, 1, v.RefundedCount, "the view after a change has its counters")
}

// listPage is one decoded page of GET /admin/vouchers.
type listPage struct {
	Vouchers   []voucher.Voucher `json:"vouchers"`
	NextCursor *string           `json:"nextCursor"`
}

func listVouchers(l *ledgertest.Ledger, tb testing.TB, query url.Values) listPage {
	tb.Helper()
	r := l.Call(tb, http.MethodGet, "/admin/vouchers?"+query.Encode(), nil)
	require.Equal(tb, http.StatusOK, r.Status, r.Raw)
	var p listPage
	require.NoError(tb, json.Unmarshal([]byte(r.Raw), &p))
	return p
}

// listPrefix pages through GET /admin/vouchers from the first code after
// prefix while the codes keep it, and returns the codes seen.
func listPrefix(l *ledgertest.Ledger, tb testing.TB, prefix string, query url.Values) []voucher.Voucher {
	tb.Helper()
	query.Set("cursor", web.EncodeCursor(prefix))
	var out []voucher.Voucher
	for pages := 0; ; pages++ {
		require.Less(tb, pages, 2_000, "paging does not end")
		p := listVouchers(l, tb, query)
		for _, v := range p.Vouchers {
			if !strings.HasPrefix(v.Code, prefix) {
				return out
			}
			out = append(out, v)
		}
		if p.NextCursor == nil {
			return out
		}
		query.Set("cursor", *p.NextCursor)
	}
}

// TestListVouchers pages through 1,003 vouchers (1,000 inserted in SQL, three
// through the route) with every filter, and checks the order, the cursors and
// that each state filter agrees with the view's state (SQL and StateAt).
func TestListVouchers(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	prefix := "zzList" + fmt.Sprint(time.Now().UnixNano()%1e9) + "-"
	// i % 4: scheduled, live, paused, ended; flash when i % 3 == 0.
	l.Exec(t, `
		INSERT INTO voucher (code, discount_amount, total_limit, per_user_limit, starts_at, ends_at, flash_sale, paused)
		SELECT $1 || lpad(i::text, 4, '0'), 100, 10, 1,
		       CASE i % 4 WHEN 0 THEN now() + interval '1 hour' WHEN 3 THEN now() - interval '2 hours'
		                  ELSE now() - interval '1 hour' END,
		       CASE i % 4 WHEN 0 THEN now() + interval '2 hours' WHEN 3 THEN now() - interval '1 hour'
		                  ELSE now() + interval '1 hour' END,
		       i % 3 = 0, i % 4 = 2
		FROM generate_series(1, 1000) i`, prefix)
	for _, suffix := range []string{"0000a", "0500a", "1000a"} { // live, standard
		l.CreateVoucher(t, ledgertest.Spec(prefix+suffix, 10, 1, false))
	}
	wantState := func(code string) (string, bool) {
		var i int
		if _, err := fmt.Sscanf(strings.TrimPrefix(code, prefix)[:4], "%d", &i); err != nil || strings.HasSuffix(code, "a") {
			return voucher.StateLive, false
		}
		return []string{voucher.StateScheduled, voucher.StateLive, voucher.StatePaused, voucher.StateEnded}[i%4], i%3 == 0
	}

	all := listPrefix(l, t, prefix, url.Values{"limit": {"37"}})
	require.Len(t, all, 1_003)
	for i, v := range all {
		if i > 0 {
			require.Less(t, all[i-1].Code, v.Code, "ordered by code, each once")
		}
		state, flash := wantState(v.Code)
		assert.Equal(t, state, v.State, v.Code)
		assert.Equal(t, flash, v.FlashSale, v.Code)
	}
	assert.Len(t, listPrefix(l, t, prefix, url.Values{}), 1_003, "default limit")
	assert.Len(t, listVouchers(l, t, url.Values{"cursor": {web.EncodeCursor(prefix)}}).Vouchers, 100, "default limit 100")
	assert.Len(t, listVouchers(l, t, url.Values{"cursor": {web.EncodeCursor(prefix)}, "limit": {"500"}}).Vouchers, 500)

	for _, state := range []string{voucher.StateScheduled, voucher.StateLive, voucher.StatePaused, voucher.StateEnded} {
		for _, flash := range []string{"", "true", "false"} {
			q := url.Values{"state": {state}, "limit": {"41"}}
			if flash != "" {
				q.Set("flashSale", flash)
			}
			got := listPrefix(l, t, prefix, q)
			want := 0
			for _, v := range all {
				if s, f := wantState(v.Code); s == state && (flash == "" || fmt.Sprint(f) == flash) {
					want++
				}
			}
			assert.Len(t, got, want, "state=%s flashSale=%s", state, flash)
			for _, v := range got {
				assert.Equal(t, state, v.State, "state=%s lists %s", state, v.Code)
			}
		}
	}

	last := listVouchers(l, t, url.Values{"cursor": {web.EncodeCursor(strings.Repeat("z", 32))}})
	assert.Empty(t, last.Vouchers)
	assert.Nil(t, last.NextCursor, "the last page has no nextCursor")
	r := l.Call(t, http.MethodGet, "/admin/vouchers?cursor="+web.EncodeCursor(strings.Repeat("z", 32)), nil)
	assert.JSONEq(t, `{"vouchers": [], "nextCursor": null}`, r.Raw)
}

// TestAdminBadQueries checks that every bad parameter of the listings is 400
// INVALID_REQUEST.
func TestAdminBadQueries(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 10, 1, false))
	for _, q := range []string{
		"state=bogus", "state=", "state=LIVE", "flashSale=yes", "flashSale=", "limit=0", "limit=501", "limit=abc",
		"limit=-1", "limit=01", "limit=", "cursor=!!!", "cursor=", "cursor=" + web.EncodeCursor("bad code!"),
		"status=RESERVED", "state=live&state=ended", "other=1", "limit=%zz",
	} {
		r := l.Call(t, http.MethodGet, "/admin/vouchers?"+q, nil)
		assert.Equal(t, http.StatusBadRequest, r.Status, "GET /admin/vouchers?%s = %s", q, r.Raw)
		assert.Equal(t, voucher.CodeInvalidRequest, r.Code(), q)
	}
	for _, q := range []string{
		"status=bogus", "status=reserved", "customerId=0", "customerId=-3", "customerId=x", "customerId=01",
		"limit=0", "limit=501", "cursor=" + web.EncodeCursor("0"), "cursor=" + web.EncodeCursor("x"), "cursor=" + web.EncodeCursor("-1"),
		"state=live", "status=RESERVED&status=CONFIRMED",
	} {
		r := l.Call(t, http.MethodGet, "/admin/vouchers/"+code+"/reservations?"+q, nil)
		assert.Equal(t, http.StatusBadRequest, r.Status, "GET .../reservations?%s = %s", q, r.Raw)
		assert.Equal(t, voucher.CodeInvalidRequest, r.Code(), q)
	}
	r := l.Call(t, http.MethodGet, "/admin/vouchers/"+code+"/reservations.csv?limit=5", nil)
	assert.Equal(t, http.StatusBadRequest, r.Status, "the export takes no parameters: %s", r.Raw)
}

// TestTermsCache checks that Store.Terms keeps a voucher's terms at most
// termsTTL and that ForgetTerms drops them at once.
func TestTermsCache(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	ctx := context.Background()
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 10, 1, false))
	clock := time.Now()
	st := store.New(l.Pool, time.Minute)
	st.Clock = func() time.Time { return clock }

	v, err := st.Terms(ctx, code)
	require.NoError(t, err)
	require.Equal(t, int64(100_000), v.DiscountAmount)
	l.Exec(t, `UPDATE voucher SET discount_amount = 7 WHERE code = $1`, code)
	v, _ = st.Terms(ctx, code)
	assert.Equal(t, int64(100_000), v.DiscountAmount, "cached within the TTL")
	clock = clock.Add(store.TermsTTL)
	v, _ = st.Terms(ctx, code)
	assert.Equal(t, int64(7), v.DiscountAmount, "read again after the TTL")

	l.Exec(t, `UPDATE voucher SET discount_amount = 8 WHERE code = $1`, code)
	st.ForgetTerms(code)
	v, _ = st.Terms(ctx, code)
	assert.Equal(t, int64(8), v.DiscountAmount, "read again after ForgetTerms")
}
