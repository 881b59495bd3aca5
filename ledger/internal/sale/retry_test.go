package sale_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/ledger/internal/web"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/voucher"
)

// A retry is decided before eligibility, on every path: the same voucher,
// customer and amount replay the stored answer (marked Idempotent-Replayed),
// whatever changed since; any of them different is ORDER_CONFLICT; a released
// order stays released.
func TestReserveRetries(t *testing.T) {
	t.Parallel()
	for _, flash := range []bool{false, true} {
		t.Run(fmt.Sprintf("flash=%v", flash), func(t *testing.T) {
			t.Parallel()
			l := ledgertest.New(t, ledgertest.Options{})
			code, other := ledgertest.NewCode(t), ledgertest.NewCode(t)
			l.CreateVoucher(t, ledgertest.Spec(code, 2, 1, flash))
			l.CreateVoucher(t, ledgertest.Spec(other, 2, 1, flash))
			res := "/vouchers/" + code + "/reservations"
			o := code + "-a"

			first := l.Call(t, "POST", res, ledgertest.ClaimBody(1, o, 5_000))
			require.Equal(t, 201, first.Status, first.Raw)
			assert.Empty(t, first.Header.Get(api.HeaderReplayed), "the first answer is no replay")
			assert.JSONEq(t, fmt.Sprintf(`{"orderId":%q,"discountAmount":5000}`, o), first.Raw, "the discount is capped at the order")

			// The voucher's terms change under the held order: it is sold out,
			// its minimum and discount rise, its window ends. The retry is
			// still answered as the first request was.
			require.Equal(t, 201, l.Call(t, "POST", res, ledgertest.ClaimBody(2, code+"-b", 5_000)).Status)
			l.Exec(t, `UPDATE voucher SET min_order_amount = 9000, discount_amount = 7, ends_at = now() WHERE code = $1`, code)
			l.Store.ForgetTerms(code)
			if flash { // Redis takes the new terms, as a change through the ledger's routes gives them
				v, err := l.Store.Voucher(context.Background(), code)
				require.NoError(t, err)
				_, err = l.Gate.Update(context.Background(), code, v)
				require.NoError(t, err)
			}
			for i := 0; i < 2; i++ {
				r := l.Call(t, "POST", res, ledgertest.ClaimBody(1, o, 5_000))
				assert.Equal(t, 201, r.Status, r.Raw)
				assert.Equal(t, first.Raw, r.Raw)
				assert.Equal(t, "true", r.Header.Get(api.HeaderReplayed))
			}
			for name, c := range map[string]struct {
				path string
				body any
			}{
				"another amount":   {res, ledgertest.ClaimBody(1, o, 5_001)},
				"another customer": {res, ledgertest.ClaimBody(2, o, 5_000)},
				"another voucher":  {"/vouchers/" + other + "/reservations", ledgertest.ClaimBody(1, o, 5_000)},
			} {
				r := l.Call(t, "POST", c.path, c.body)
				assert.Equal(t, 409, r.Status, "%s: %s", name, r.Raw)
				assert.Equal(t, voucher.CodeOrderConflict, r.Code(), name)
				assert.Empty(t, r.Header.Get(api.HeaderReplayed), name)
			}
			require.Equal(t, 204, l.Call(t, "DELETE", res+"/"+o, nil).Status)
			r := l.Call(t, "POST", res, ledgertest.ClaimBody(1, o, 5_000))
			assert.Equal(t, 409, r.Status, r.Raw)
			assert.Equal(t, voucher.CodeReservationReleased, r.Code())
			b := l.CheckBooks(t, code)
			assert.Equal(t, 1, b.Used)
			if flash {
				ledgertest.CheckRedisMatches(t, l.Gate, b, code)
			}
		})
	}
}

// The single internal route marks a replay with the header too.
func TestAdmittedRouteReplayHeader(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 2, 1, true))
	path := "/internal/vouchers/" + code + "/reservations"
	r := l.Call(t, "POST", path, ledgertest.ClaimBody(1, code+"-a", 150_000))
	require.Equal(t, 201, r.Status, r.Raw)
	assert.Empty(t, r.Header.Get(api.HeaderReplayed))
	r = l.Call(t, "POST", path, ledgertest.ClaimBody(1, code+"-a", 150_000))
	require.Equal(t, 201, r.Status, r.Raw)
	assert.Equal(t, "true", r.Header.Get(api.HeaderReplayed))
	r = l.Call(t, "POST", path, ledgertest.ClaimBody(1, code+"-a", 150_001))
	assert.Equal(t, 409, r.Status, r.Raw)
	assert.Equal(t, voucher.CodeOrderConflict, r.Code())
	assert.Equal(t, ledgertest.DBCounts{Used: 1, Rows: 1, Active: 1, MaxPerCustomer: 1}, l.Counts(t, code))
}

// orderIds made only of dots are refused in bodies and in paths, and a path
// with a dot segment never reaches a handler as that segment.
func TestDotOnlyOrderIDs(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{NoRedis: true})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 5, 5, false))
	res := "/vouchers/" + code + "/reservations"
	for _, id := range []string{".", "..", "...."} {
		r := l.Call(t, "POST", res, ledgertest.ClaimBody(1, id, 5_000))
		assert.Equal(t, 400, r.Status, "reserve %q: %s", id, r.Raw)
		assert.Equal(t, voucher.CodeInvalidRequest, r.Code())
	}
	assert.Equal(t, 201, l.Call(t, "POST", res, ledgertest.ClaimBody(1, "a.b", 5_000)).Status, "dots inside an id are fine")

	// Sent as is, without a client's path normalisation.
	h := l.Handler(func(s *web.Server) { s.Token = "" })
	for _, p := range []struct{ method, path string }{
		{"POST", res + "/../confirm"}, {"POST", res + "/./confirm"}, {"POST", res + "/../refund"},
		{"DELETE", res + "/.."}, {"GET", res + "/.."}, {"DELETE", res + "/."},
	} {
		req := httptest.NewRequest(p.method, res, nil)
		req.URL.Path, req.RequestURI = p.path, p.path
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		assert.Equal(t, 400, w.Code, "%s %s = %d %s", p.method, p.path, w.Code, w.Body)
		assert.Contains(t, w.Body.String(), voucher.CodeInvalidRequest, "%s %s", p.method, p.path)
	}
	assert.Equal(t, ledgertest.DBCounts{Used: 1, Rows: 1, Active: 1, MaxPerCustomer: 1}, l.Counts(t, code))
}

// A lowered perUserLimit keeps the uses customers hold and stops new ones
// above it, under concurrency, with the usage rows' CHECK intact.
func TestLoweredPerUserLimit(t *testing.T) {
	t.Parallel()
	for _, flash := range []bool{false, true} {
		t.Run(fmt.Sprintf("flash=%v", flash), func(t *testing.T) {
			t.Parallel()
			l := ledgertest.New(t, ledgertest.Options{})
			code := ledgertest.NewCode(t)
			l.CreateVoucher(t, ledgertest.Spec(code, 100, 3, flash))
			res := "/vouchers/" + code + "/reservations"
			for i := 0; i < 3; i++ {
				require.Equal(t, 201, l.Call(t, "POST", res, ledgertest.ClaimBody(1, fmt.Sprintf("%s-held%d", code, i), 5_000)).Status)
			}
			// As PATCH does it (LEDGER-ADMIN builds the route): the voucher and the
			// usage rows, then Redis for a flash voucher.
			l.Exec(t, `UPDATE voucher SET per_user_limit = 1 WHERE code = $1`, code)
			l.Exec(t, `UPDATE voucher_customer_usage SET per_user_limit = GREATEST(1, used_count) WHERE voucher_code = $1`, code)
			if flash {
				v, err := l.Store.Voucher(context.Background(), code)
				require.NoError(t, err)
				_, err = l.Gate.Update(context.Background(), code, v)
				require.NoError(t, err)
			}
			l.Store.ForgetTerms(code)

			// Customer 1 keeps 3 and gets no more; 20 new customers race with 4
			// orders each and get exactly one use each.
			var mu sync.Mutex
			got := map[string]int{}
			var wg sync.WaitGroup
			for c := 1; c <= 21; c++ {
				for o := 0; o < 4; o++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						r := l.Call(t, "POST", res, ledgertest.ClaimBody(int64(c), fmt.Sprintf("%s-c%d-%d", code, c, o), 5_000))
						mu.Lock()
						got[fmt.Sprint(r.Status, r.Code())]++
						mu.Unlock()
					}()
				}
			}
			wg.Wait()
			assert.Equal(t, map[string]int{"201": 20, "409ALREADY_USED": 64}, got)
			b := l.CheckBooks(t, code)
			assert.Equal(t, 23, b.Used)
			assert.Equal(t, 3, b.Active[1], "the uses held above the new limit stay")
			require.Equal(t, 200, l.Call(t, "POST", res+"/"+code+"-held0/confirm", nil).Status)
			require.Equal(t, 204, l.Call(t, "DELETE", res+"/"+code+"-held1", nil).Status)
			r := l.Call(t, "POST", res, ledgertest.ClaimBody(1, code+"-again", 5_000))
			assert.Equal(t, 409, r.Status, "2 held, limit 1: %s", r.Raw)
			var limit int
			require.NoError(t, l.Pool.QueryRow(context.Background(), `SELECT per_user_limit FROM voucher_customer_usage
				WHERE voucher_code = $1 AND customer_id = 2`, code).Scan(&limit))
			assert.Equal(t, 1, limit, "a new usage row carries the current limit")
			if flash {
				ledgertest.CheckRedisMatches(t, l.Gate, l.CheckBooks(t, code), code)
			}
		})
	}
}

// A paused standard voucher refuses new reservations (the guarded UPDATE
// decides even when the cached terms are not yet paused) while confirm,
// release, refund, reads and retries work as usual.
func TestPausedStandardVoucher(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{NoRedis: true})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 10, 5, false))
	res := "/vouchers/" + code + "/reservations"
	for _, o := range []string{"a", "b", "c"} {
		require.Equal(t, 201, l.Call(t, "POST", res, ledgertest.ClaimBody(1, code+"-"+o, 150_000)).Status)
	}
	require.Equal(t, 200, l.Call(t, "POST", res+"/"+code+"-c/confirm", nil).Status)
	l.Exec(t, `UPDATE voucher SET paused = true WHERE code = $1`, code) // the terms stay cached: the UPDATE's guard answers
	r := l.Call(t, "POST", res, ledgertest.ClaimBody(2, code+"-new", 150_000))
	assert.Equal(t, 422, r.Status, r.Raw)
	assert.Equal(t, voucher.ReasonPaused, r.Body["reason"])
	l.Store.ForgetTerms(code)
	r = l.Call(t, "POST", res, ledgertest.ClaimBody(2, code+"-new2", 150_000))
	assert.Equal(t, 422, r.Status, r.Raw)
	assert.Equal(t, voucher.ReasonPaused, r.Body["reason"])

	steps := []struct {
		method, path string
		body         any
		status       int
	}{
		{"POST", res, ledgertest.ClaimBody(1, code+"-a", 150_000), 201},
		{"POST", res + "/" + code + "-a/confirm", nil, 200},
		{"DELETE", res + "/" + code + "-b", nil, 204},
		{"POST", res + "/" + code + "-c/refund", nil, 200},
		{"GET", res + "/" + code + "-c", nil, 200},
		{"GET", "/admin/vouchers/" + code, nil, 200},
	}
	for _, s := range steps {
		r := l.Call(t, s.method, s.path, s.body)
		assert.Equal(t, s.status, r.Status, "%s %s while paused = %s", s.method, s.path, r.Raw)
	}
	assert.Equal(t, ledgertest.DBCounts{Used: 1, Rows: 3, Active: 1, MaxPerCustomer: 1}, l.Counts(t, code))
	l.Exec(t, `UPDATE voucher SET paused = false WHERE code = $1`, code)
	l.Store.ForgetTerms(code)
	assert.Equal(t, http.StatusCreated, l.Call(t, "POST", res, ledgertest.ClaimBody(2, code+"-after", 150_000)).Status)
}

// A flash voucher paused in the database but not (yet) in Redis: the gate
// admits, the guarded UPDATE refuses PAUSED, and the use is given back
// without recording the order finished, so it may be admitted once resumed.
func TestFlashPausedInDatabaseGivesBack(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 3, 2, true))
	res := "/vouchers/" + code + "/reservations"
	require.Equal(t, 201, l.Call(t, "POST", res, ledgertest.ClaimBody(1, code+"-held", 150_000)).Status)
	l.Exec(t, `UPDATE voucher SET paused = true WHERE code = $1`, code)
	l.Store.ForgetTerms(code)

	var wg sync.WaitGroup
	replies := make([]ledgertest.Reply, 10)
	for i := range replies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i] = l.Call(t, "POST", res, ledgertest.ClaimBody(int64(10+i), fmt.Sprintf("%s-n%d", code, i), 150_000))
		}()
	}
	wg.Wait()
	paused := 0
	for _, r := range replies {
		switch {
		case r.Status == 422 && r.Body["reason"] == voucher.ReasonPaused:
			paused++
		case r.Status == 409 && r.Code() == voucher.CodeOutOfStock: // Redis had lent its 2 uses out at that instant
		default:
			t.Errorf("Reserve while paused in the database = %d %s, want 422 PAUSED or 409 OUT_OF_STOCK", r.Status, r.Raw)
		}
	}
	assert.GreaterOrEqual(t, paused, 2, "the gate admitted at least its 2 uses, and the database refused them")
	r := l.Call(t, "POST", res, ledgertest.ClaimBody(1, code+"-held", 150_000))
	assert.Equal(t, 201, r.Status, "a held order's retry while paused: %s", r.Raw)
	assert.Equal(t, "true", r.Header.Get(api.HeaderReplayed))
	b := l.CheckBooks(t, code)
	assert.Equal(t, 1, b.Used)
	ledgertest.CheckRedisMatches(t, l.Gate, b, code)
	assert.Empty(t, ledgertest.RedisState(t, l.Gate, code).Finished, "a refused write is not a finished order")

	l.Exec(t, `UPDATE voucher SET paused = false WHERE code = $1`, code)
	l.Store.ForgetTerms(code)
	r = l.Call(t, "POST", res, ledgertest.ClaimBody(10, code+"-n0", 150_000))
	assert.Equal(t, 201, r.Status, "the same order once resumed: %s", r.Raw)
	ledgertest.CheckRedisMatches(t, l.Gate, l.CheckBooks(t, code), code)
}

// A batch of retries of a held order with another amount and with its own:
// the changed one is ORDER_CONFLICT, the others replay (each claim is answered
// for itself, not copied from the first claim of the same orderId), and Redis
// keeps holding the order's use throughout (a conflict answered from the
// order's own row gives nothing back).
func TestBatchRetriesOfHeldOrder(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 3, 1, true))
	order := code + "-a"
	r := l.Call(t, "POST", "/vouchers/"+code+"/reservations", ledgertest.ClaimBody(1, order, 150_000))
	require.Equal(t, 201, r.Status, r.Raw)

	claims := []map[string]any{
		ledgertest.ClaimBody(1, order, 150_001), ledgertest.ClaimBody(1, order, 150_000), ledgertest.ClaimBody(1, order, 150_000),
	}
	r = l.Call(t, "POST", "/internal/vouchers/"+code+"/reservations/batch", map[string]any{"claims": claims})
	require.Equal(t, 200, r.Status, r.Raw)
	results := r.Body["results"].([]any)
	require.Len(t, results, 3)
	for i, want := range []int{409, 201, 201} {
		assert.EqualValues(t, want, results[i].(map[string]any)["status"], "claim %d: %v", i, results[i])
	}
	st, loaded, err := l.Gate.State(context.Background(), code)
	require.NoError(t, err)
	require.True(t, loaded)
	require.Len(t, st.Orders, 1, "the order still holds its use in redis")
	assert.Equal(t, order, st.Orders[0].OrderID)
	assert.EqualValues(t, 2, st.Remaining)
	assert.Equal(t, ledgertest.DBCounts{Used: 1, Rows: 1, Active: 1, MaxPerCustomer: 1}, l.Counts(t, code))
}
