package web_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/shared/api"
)

// The article's own check, over HTTP: 200 customers race for 10 uses.
func TestReserveNeverOversells(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{NoRedis: true})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 10, 1, false))

	statuses := make([]ledgertest.Reply, 200)
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = l.Call(t, http.MethodPost, "/vouchers/"+code+"/reservations",
				ledgertest.ClaimBody(int64(i+1), fmt.Sprintf("%s-o%d", code, i), 5_000))
		}()
	}
	wg.Wait()
	created, soldOut := 0, 0
	for _, r := range statuses {
		switch {
		case r.Status == http.StatusCreated:
			created++
		case r.Status == http.StatusConflict && r.Code() == "OUT_OF_STOCK":
			soldOut++
		default:
			t.Errorf("Reserve = %d %s, want 201 or 409 OUT_OF_STOCK", r.Status, r.Raw)
		}
	}
	assert.Equal(t, 10, created)
	assert.Equal(t, 190, soldOut)
	c := l.Counts(t, code)
	assert.Equal(t, ledgertest.DBCounts{Used: 10, Rows: 10, Active: 10, MaxPerCustomer: 1}, c)
}

// Customers sending several orders never hold more than per_user_limit.
func TestReservePerUserLimit(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{NoRedis: true})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 50, 2, false))

	const customers, ordersEach = 40, 4
	var mu sync.Mutex
	perCustomer := map[int64]int{}
	results := map[string]int{}
	var wg sync.WaitGroup
	for c := 1; c <= customers; c++ {
		for o := 0; o < ordersEach; o++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := l.Call(t, http.MethodPost, "/vouchers/"+code+"/reservations",
					ledgertest.ClaimBody(int64(c), fmt.Sprintf("%s-c%d-o%d", code, c, o), 5_000))
				mu.Lock()
				defer mu.Unlock()
				results[fmt.Sprint(r.Status, r.Code())]++
				if r.Status == http.StatusCreated {
					perCustomer[int64(c)]++
				}
			}()
		}
	}
	wg.Wait()
	assert.Equal(t, 50, results["201"], "results: %v", results)
	assert.Equal(t, customers*ordersEach, results["201"]+results["409ALREADY_USED"]+results["409OUT_OF_STOCK"], "results: %v", results)
	for c, n := range perCustomer {
		assert.LessOrEqual(t, n, 2, "customer %d holds %d uses", c, n)
	}
	cnt := l.Counts(t, code)
	assert.Equal(t, 50, cnt.Used)
	assert.Equal(t, 50, cnt.Active)
	assert.LessOrEqual(t, cnt.MaxPerCustomer, 2)
	var usage int
	require.NoError(t, l.Pool.QueryRow(context.Background(),
		`SELECT coalesce(sum(used_count), 0) FROM voucher_customer_usage WHERE voucher_code = $1`, code).Scan(&usage))
	assert.Equal(t, 50, usage, "customer usage counts must add up to used_count")
}

// The same orderId sent 20 times at once consumes one use and gets 20 identical 201s.
func TestReserveIdempotentUnderConcurrency(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{NoRedis: true})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 5, 1, false))

	replies := make([]ledgertest.Reply, 20)
	var wg sync.WaitGroup
	for i := range replies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i] = l.Call(t, http.MethodPost, "/vouchers/"+code+"/reservations", ledgertest.ClaimBody(7, code+"-same", 150_000))
		}()
	}
	wg.Wait()
	originals := 0
	for _, r := range replies {
		assert.Equal(t, http.StatusCreated, r.Status, r.Raw)
		assert.Equal(t, replies[0].Raw, r.Raw)
		if r.Header.Get(api.HeaderReplayed) != "true" {
			originals++
		}
	}
	assert.Equal(t, 1, originals, "every answer but the first is marked %s", api.HeaderReplayed)
	assert.JSONEq(t, fmt.Sprintf(`{"orderId":%q,"discountAmount":100000}`, code+"-same"), replies[0].Raw)
	assert.Equal(t, ledgertest.DBCounts{Used: 1, Rows: 1, Active: 1, MaxPerCustomer: 1}, l.Counts(t, code))
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{NoRedis: true})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 1, 1, false))
	res := "/vouchers/" + code + "/reservations"
	o1, o2, o3 := code+"-1", code+"-2", code+"-3"

	steps := []struct {
		name, method, path string
		body               any
		status             int
		code               string
	}{
		{"reserve", "POST", res, ledgertest.ClaimBody(1, o1, 5_000), 201, ""},
		{"retry is the same", "POST", res, ledgertest.ClaimBody(1, o1, 5_000), 201, ""},
		{"sold out for another", "POST", res, ledgertest.ClaimBody(2, o2, 150_000), 409, "OUT_OF_STOCK"},
		{"same order other customer", "POST", res, ledgertest.ClaimBody(2, o1, 5_000), 409, "ORDER_CONFLICT"},
		{"get", "GET", res + "/" + o1, nil, 200, ""},
		{"unknown order", "GET", res + "/nope", nil, 404, "RESERVATION_NOT_FOUND"},
		{"release", "DELETE", res + "/" + o1, nil, 204, ""},
		{"release again", "DELETE", res + "/" + o1, nil, 204, ""},
		{"reserve released order", "POST", res, ledgertest.ClaimBody(1, o1, 5_000), 409, "RESERVATION_RELEASED"},
		{"another customer gets the use", "POST", res, ledgertest.ClaimBody(2, o2, 150_000), 201, ""},
		{"confirm", "POST", res + "/" + o2 + "/confirm", nil, 200, ""},
		{"confirm again", "POST", res + "/" + o2 + "/confirm", nil, 200, ""},
		{"release confirmed", "DELETE", res + "/" + o2, nil, 409, "ALREADY_CONFIRMED"},
		// Issue 12: an explicit release is final (it was RESERVATION_EXPIRED,
		// the late-payment rule, which now holds for expired holds only).
		{"confirm after release", "POST", res + "/" + o1 + "/confirm", nil, 409, "RESERVATION_RELEASED"},
		{"confirm unknown", "POST", res + "/nope/confirm", nil, 404, "RESERVATION_NOT_FOUND"},
		{"release unknown", "DELETE", res + "/nope", nil, 404, "RESERVATION_NOT_FOUND"},
		{"order under another voucher", "GET", "/vouchers/OTHER" + code[:5] + "/reservations/" + o2, nil, 404, "RESERVATION_NOT_FOUND"},
		{"unknown voucher", "POST", "/vouchers/NOPE" + code[:5] + "/reservations", ledgertest.ClaimBody(3, o3, 5_000), 404, "VOUCHER_NOT_FOUND"},
		{"order too small", "POST", res, ledgertest.ClaimBody(3, o3, 999), 422, "NOT_ELIGIBLE"},
	}
	for _, s := range steps {
		r := l.Call(t, s.method, s.path, s.body)
		if r.Status != s.status || r.Code() != s.code {
			t.Fatalf("%s: %s %s = %d %s, want %d %s", s.name, s.method, s.path, r.Status, r.Raw, s.status, s.code)
		}
	}
	r := l.Call(t, "GET", res+"/"+o2, nil)
	assert.Equal(t, "CONFIRMED", r.Body["status"])
	assert.EqualValues(t, 2, r.Body["customerId"])
	assert.EqualValues(t, 100000, r.Body["discountAmount"])
	r = l.Call(t, "GET", "/admin/vouchers/"+code, nil)
	assert.EqualValues(t, 1, r.Body["usedCount"])
	assert.EqualValues(t, 1, r.Body["confirmedCount"])
	assert.EqualValues(t, 0, r.Body["reservedCount"])
	assert.EqualValues(t, 0, r.Body["remaining"])
	assert.Equal(t, ledgertest.DBCounts{Used: 1, Rows: 2, Active: 1, MaxPerCustomer: 1}, l.Counts(t, code))
}

// A payment that arrives after the hold ran out confirms if a use is left.
func TestLateConfirm(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{NoRedis: true, TTL: 300 * time.Millisecond})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 2, 1, false))
	res := "/vouchers/" + code + "/reservations"

	// Expired but not swept yet: the use is still held, so it confirms.
	require.Equal(t, 201, l.Call(t, "POST", res, ledgertest.ClaimBody(1, code+"-a", 5_000)).Status)
	time.Sleep(400 * time.Millisecond)
	r := l.Call(t, "POST", res+"/"+code+"-a/confirm", nil)
	require.Equal(t, 200, r.Status, r.Raw)
	assert.Equal(t, "CONFIRMED", r.Body["status"])

	// Expired and swept, a use left: it takes the use again.
	require.Equal(t, 201, l.Call(t, "POST", res, ledgertest.ClaimBody(2, code+"-b", 5_000)).Status)
	time.Sleep(400 * time.Millisecond)
	n, err := l.Jobs.Sweep(context.Background())
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 1)
	require.Equal(t, "RELEASED", l.Call(t, "GET", res+"/"+code+"-b", nil).Body["status"])
	require.Equal(t, 1, l.Counts(t, code).Used)
	r = l.Call(t, "POST", res+"/"+code+"-b/confirm", nil)
	require.Equal(t, 200, r.Status, r.Raw)
	assert.Equal(t, ledgertest.DBCounts{Used: 2, Rows: 2, Active: 2, MaxPerCustomer: 1}, l.Counts(t, code))

	// Expired and swept, and the use went to someone else meanwhile:
	// RESERVATION_EXPIRED. (Issue 12: a DELETE is final, so the hold expires
	// here instead of being released.)
	code2 := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code2, 1, 1, false))
	res2 := "/vouchers/" + code2 + "/reservations"
	require.Equal(t, 201, l.Call(t, "POST", res2, ledgertest.ClaimBody(1, code2+"-a", 5_000)).Status)
	time.Sleep(400 * time.Millisecond)
	_, err = l.Jobs.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, 201, l.Call(t, "POST", res2, ledgertest.ClaimBody(2, code2+"-b", 5_000)).Status)
	r = l.Call(t, "POST", res2+"/"+code2+"-a/confirm", nil)
	assert.Equal(t, 409, r.Status)
	assert.Equal(t, "RESERVATION_EXPIRED", r.Code())
	assert.Equal(t, ledgertest.DBCounts{Used: 1, Rows: 2, Active: 1, MaxPerCustomer: 1}, l.Counts(t, code2))
}

func TestEligibilityWindow(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{NoRedis: true})
	future, past := ledgertest.NewCode(t), ledgertest.NewCode(t)
	s := ledgertest.Spec(future, 5, 1, false)
	s.StartsAt, s.EndsAt = time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)
	l.CreateVoucher(t, s)
	s = ledgertest.Spec(past, 5, 1, false)
	s.StartsAt, s.EndsAt = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
	l.CreateVoucher(t, s)
	for code, reason := range map[string]string{future: "NOT_STARTED", past: "EXPIRED"} {
		r := l.Call(t, "POST", "/vouchers/"+code+"/reservations", ledgertest.ClaimBody(1, code+"-o", 5_000))
		assert.Equal(t, 422, r.Status, r.Raw)
		assert.Equal(t, "NOT_ELIGIBLE", r.Code())
		assert.Equal(t, reason, r.Body["reason"])
		assert.Equal(t, 0, l.Counts(t, code).Rows)
	}
}

func TestCreateVoucher(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{NoRedis: true})
	code := ledgertest.NewCode(t)
	s := ledgertest.Spec(code, 1000, 2, false)
	r := l.Call(t, "POST", "/admin/vouchers", s)
	require.Equal(t, 201, r.Status, r.Raw)
	assert.Equal(t, code, r.Body["code"])
	assert.EqualValues(t, 1000, r.Body["remaining"])
	r = l.Call(t, "POST", "/admin/vouchers", s)
	assert.Equal(t, 409, r.Status)
	assert.Equal(t, "VOUCHER_EXISTS", r.Code())
	r = l.Call(t, "GET", "/admin/vouchers/NOPE"+code[:4], nil)
	assert.Equal(t, 404, r.Status)
	assert.Equal(t, "VOUCHER_NOT_FOUND", r.Code())
	r = l.Call(t, "GET", "/admin/vouchers/"+code, nil)
	require.Equal(t, 200, r.Status)
	for _, f := range []string{"code", "discountAmount", "minOrderAmount", "totalLimit", "perUserLimit", "startsAt",
		"endsAt", "flashSale", "usedCount", "reservedCount", "confirmedCount", "remaining"} {
		assert.Contains(t, r.Body, f)
	}
}

// Bad input gets 400 INVALID_REQUEST with a message, never a 500, and writes nothing.
func TestBadInput(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{NoRedis: true})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 10, 1, false))
	res := "/vouchers/" + code + "/reservations"
	valid := `"startsAt":"2026-01-01T00:00:00Z","endsAt":"2030-01-01T00:00:00Z"`
	cases := []struct {
		name, method, path string
		body               string
	}{
		{"empty body", "POST", res, ""},
		{"not json", "POST", res, "hello"},
		{"array", "POST", res, `[1,2]`},
		{"null", "POST", res, `null`},
		{"truncated", "POST", res, `{"customerId":1,`},
		{"unknown field", "POST", res, `{"customerId":1,"orderId":"a","orderAmount":5,"extra":1}`},
		{"missing customerId", "POST", res, `{"orderId":"a","orderAmount":5}`},
		{"missing orderId", "POST", res, `{"customerId":1,"orderAmount":5}`},
		{"missing orderAmount", "POST", res, `{"customerId":1,"orderId":"a"}`},
		{"customerId string", "POST", res, `{"customerId":"1","orderId":"a","orderAmount":5}`},
		{"customerId zero", "POST", res, `{"customerId":0,"orderId":"a","orderAmount":5}`},
		{"customerId negative", "POST", res, `{"customerId":-4,"orderId":"a","orderAmount":5}`},
		{"customerId float", "POST", res, `{"customerId":1.5,"orderId":"a","orderAmount":5}`},
		{"customerId huge", "POST", res, `{"customerId":99999999999999999999,"orderId":"a","orderAmount":5}`},
		{"orderId number", "POST", res, `{"customerId":1,"orderId":5,"orderAmount":5}`},
		{"orderId empty", "POST", res, `{"customerId":1,"orderId":"","orderAmount":5}`},
		{"orderId too long", "POST", res, `{"customerId":1,"orderId":"` + strings.Repeat("a", 65) + `","orderAmount":5}`},
		{"orderId with space", "POST", res, `{"customerId":1,"orderId":"a b","orderAmount":5}`},
		{"orderId with braces", "POST", res, `{"customerId":1,"orderId":"{x}","orderAmount":5}`},
		{"orderAmount negative", "POST", res, `{"customerId":1,"orderId":"a","orderAmount":-1}`},
		{"orderAmount string", "POST", res, `{"customerId":1,"orderId":"a","orderAmount":"5"}`},
		{"orderAmount null", "POST", res, `{"customerId":1,"orderId":"a","orderAmount":null}`},
		{"trailing data", "POST", res, `{"customerId":1,"orderId":"a","orderAmount":5} {}`},
		{"body too large", "POST", res, `{"customerId":1,"orderId":"a","orderAmount":5,"pad":"` + strings.Repeat("x", 17<<10) + `"}`},
		{"code with braces", "POST", "/vouchers/%7BX%7D/reservations", `{"customerId":1,"orderId":"a","orderAmount":5}`},
		{"code too long", "POST", "/vouchers/" + strings.Repeat("A", 33) + "/reservations", `{"customerId":1,"orderId":"a","orderAmount":5}`},
		{"code with colon", "POST", "/vouchers/A:B/reservations", `{"customerId":1,"orderId":"a","orderAmount":5}`},
		{"confirm bad order", "POST", res + "/a%20b/confirm", ""},
		{"release bad order", "DELETE", res + "/" + strings.Repeat("z", 70), ""},
		{"create: missing code", "POST", "/admin/vouchers", `{"discountAmount":1,"totalLimit":1,` + valid + `}`},
		{"create: bad code", "POST", "/admin/vouchers", `{"code":"a b","discountAmount":1,"totalLimit":1,` + valid + `}`},
		{"create: zero discount", "POST", "/admin/vouchers", `{"code":"` + code + `X","discountAmount":0,"totalLimit":1,` + valid + `}`},
		{"create: negative limit", "POST", "/admin/vouchers", `{"code":"` + code + `X","discountAmount":1,"totalLimit":-1,` + valid + `}`},
		{"create: per user zero", "POST", "/admin/vouchers", `{"code":"` + code + `X","discountAmount":1,"totalLimit":1,"perUserLimit":0,` + valid + `}`},
		{"create: bad time", "POST", "/admin/vouchers", `{"code":"` + code + `X","discountAmount":1,"totalLimit":1,"startsAt":"yesterday","endsAt":"2030-01-01T00:00:00Z"}`},
		{"create: window reversed", "POST", "/admin/vouchers", `{"code":"` + code + `X","discountAmount":1,"totalLimit":1,"startsAt":"2030-01-01T00:00:00Z","endsAt":"2026-01-01T00:00:00Z"}`},
		{"create: flashSale string", "POST", "/admin/vouchers", `{"code":"` + code + `X","discountAmount":1,"totalLimit":1,"flashSale":"yes",` + valid + `}`},
		{"create: negative min order", "POST", "/admin/vouchers", `{"code":"` + code + `X","discountAmount":1,"minOrderAmount":-5,"totalLimit":1,` + valid + `}`},
	}
	require.GreaterOrEqual(t, len(cases), 30)
	for _, c := range cases {
		var body any
		if c.body != "" {
			body = c.body
		}
		r := l.Call(t, c.method, c.path, body)
		if r.Status != 400 || r.Code() != "INVALID_REQUEST" || r.Body["message"] == "" {
			t.Errorf("%s: %s %s = %d %s, want 400 INVALID_REQUEST with a message", c.name, c.method, c.path, r.Status, r.Raw)
		}
	}
	assert.Equal(t, ledgertest.DBCounts{}, l.Counts(t, code))
	var n int
	require.NoError(t, l.Pool.QueryRow(context.Background(), `SELECT count(*) FROM voucher WHERE code = $1`, code+"X").Scan(&n))
	assert.Zero(t, n)
}

func TestAuth(t *testing.T) {
	t.Parallel()
	on := ledgertest.New(t, ledgertest.Options{NoRedis: true, Token: "s3cret"})
	code := ledgertest.NewCode(t)
	on.CreateVoucher(t, ledgertest.Spec(code, 1, 1, false))
	for _, tok := range []string{"", "wrong", "s3cre", "s3cret2", "S3CRET"} {
		r := ledgertest.Call(t, "GET", on.URL+"/admin/vouchers/"+code, tok, nil)
		assert.Equal(t, 401, r.Status, "token %q", tok)
		assert.Equal(t, "UNAUTHORIZED", r.Code())
		r = ledgertest.Call(t, "POST", on.URL+"/vouchers/"+code+"/reservations", tok, ledgertest.ClaimBody(1, code+"-x", 5_000))
		assert.Equal(t, 401, r.Status, "token %q", tok)
	}
	assert.Equal(t, 0, on.Counts(t, code).Rows)
	assert.Equal(t, 200, ledgertest.Call(t, "GET", on.URL+"/admin/vouchers/"+code, "s3cret", nil).Status)
	assert.Equal(t, 200, ledgertest.Call(t, "GET", on.URL+"/healthz", "", nil).Status)
	assert.Equal(t, 200, ledgertest.Call(t, "GET", on.URL+"/readyz", "", nil).Status)

	off := ledgertest.New(t, ledgertest.Options{NoRedis: true})
	assert.Equal(t, 200, ledgertest.Call(t, "GET", off.URL+"/admin/vouchers/"+code, "", nil).Status)
}
