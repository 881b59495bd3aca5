package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/ledger/internal/web"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
	"github.com/flashgate/flashgate/shared/voucher"
)

// hostileCounts is what a hostile request must not change.
type hostileCounts struct {
	httpxtest.RowCounts
	GateCalls int64
}

func countHostile(tb testing.TB, l *ledgertest.Ledger, prefix string, g *gate.Gate) hostileCounts {
	tb.Helper()
	c := hostileCounts{RowCounts: httpxtest.CountRows(tb, l.Pool, prefix)}
	if g != nil {
		c.GateCalls = g.Calls()
	}
	return c
}

// TestLedgerHostileInput sends every hostile case to the ledger behind the
// production server settings: each gets a clear 4xx, nothing is written to
// Postgres, Redis is never called, and the ledger still answers afterwards.
// It does not run in parallel, so that whole-table counts are its own.
func TestLedgerHostileInput(t *testing.T) {
	const token = "hostile-ledger-token"
	l := ledgertest.New(t, ledgertest.Options{Token: token})
	base, _ := httpxtest.Serve(t, l.Handler(func(s *web.Server) { s.Metrics = nil }))

	prefix := ledgertest.NewCode(t)
	code, flash := prefix+"s", prefix+"f"
	l.CreateVoucher(t, ledgertest.Spec(code, 10, 1, false))
	l.CreateVoucher(t, ledgertest.Spec(flash, 10, 1, true))
	order := prefix + "-held"
	st, body := l.Do(t, http.MethodPost, "/vouchers/"+code+"/reservations", ledgertest.ClaimBody(1, order, 5_000))
	require.Equal(t, http.StatusCreated, st, body)
	flashBefore, loaded, err := l.Gate.State(context.Background(), flash)
	require.NoError(t, err)
	require.True(t, loaded)

	cases := httpxtest.PublicHostileCases(code, flash, order, prefix+"-x")
	admin := "/admin/vouchers"
	newVoucher := func(code, extra string) []byte {
		return []byte(`{"code":"` + code + `","discountAmount":100,"totalLimit":5,` +
			`"startsAt":"2026-01-01T00:00:00Z","endsAt":"2030-01-01T00:00:00Z"` + extra + `}`)
	}
	vBody := func(fields string) []byte { return []byte(`{` + fields + `}`) }
	invalid := voucher.CodeInvalidRequest
	unauthorized := voucher.CodeUnauthorized
	cases = append(cases, []httpxtest.HostileCase{
		// Authentication.
		{Name: "no Authorization", Method: http.MethodPost, Path: "/vouchers/" + code + "/reservations",
			Body: httpxtest.Claim("7", `"`+prefix+`-a1"`, "5000"), Auth: "-", Status: 401, Code: unauthorized},
		{Name: "wrong token", Method: http.MethodGet, Path: "/vouchers/" + code + "/reservations/" + order,
			Auth: "Bearer wrong-token", Status: 401, Code: unauthorized},
		{Name: "token without Bearer", Method: http.MethodGet, Path: "/vouchers/" + code + "/reservations/" + order,
			Auth: token, Status: 401, Code: unauthorized},
		{Name: "empty bearer", Method: http.MethodGet, Path: admin + "/" + code, Auth: "Bearer ", Status: 401, Code: unauthorized},
		{Name: "token prefix", Method: http.MethodGet, Path: admin + "/" + code, Auth: "Bearer " + token[:len(token)-1], Status: 401, Code: unauthorized},
		{Name: "token with a suffix", Method: http.MethodGet, Path: admin + "/" + code, Auth: "Bearer " + token + "x", Status: 401, Code: unauthorized},
		{Name: "Basic auth", Method: http.MethodGet, Path: admin + "/" + code, Auth: "Basic aG9zdGlsZTp0b2tlbg==", Status: 401, Code: unauthorized},
		{Name: "token of 20 KiB", Method: http.MethodGet, Path: admin + "/" + code, Auth: "Bearer " + strings.Repeat("t", 20<<10), Status: 401, Code: unauthorized},
		{Name: "wrong token first of two", Method: http.MethodGet, Path: admin + "/" + code, Auth: "Bearer nope",
			Headers: map[string]string{"Authorization": "Bearer " + token}, Status: 401, Code: unauthorized},
		{Name: "no token on create voucher", Method: http.MethodPost, Path: admin, Body: newVoucher(prefix+"a2", ""), Auth: "-", Status: 401, Code: unauthorized},
		{Name: "no token on the internal write", Method: http.MethodPost, Path: "/internal/vouchers/" + flash + "/reservations",
			Body: httpxtest.Claim("7", `"`+prefix+`-a3"`, "5000"), Auth: "-", Status: 401, Code: unauthorized},
		{Name: "no token on warmup", Method: http.MethodPost, Path: admin + "/" + flash + "/warmup", Auth: "-", Status: 401, Code: unauthorized},
		{Name: "no token on a wrong method", Method: http.MethodPut, Path: admin, Auth: "-", Status: 401, Code: unauthorized},
		// Admin bodies.
		{Name: "voucher code with braces", Method: http.MethodPost, Path: admin, Body: newVoucher("{"+prefix+"}", ""), Status: 400, Code: invalid},
		{Name: "voucher code with a colon", Method: http.MethodPost, Path: admin, Body: newVoucher(prefix+":meta", ""), Status: 400, Code: invalid},
		{Name: "voucher code with unicode", Method: http.MethodPost, Path: admin, Body: newVoucher(prefix+"é", ""), Status: 400, Code: invalid},
		{Name: "voucher totalLimit 1e400", Method: http.MethodPost, Path: admin, Body: vBody(`"code":"` + prefix + `b1","discountAmount":100,"totalLimit":1e400,"startsAt":"2026-01-01T00:00:00Z","endsAt":"2030-01-01T00:00:00Z"`), Status: 400, Code: invalid},
		{Name: "voucher totalLimit 2^31", Method: http.MethodPost, Path: admin, Body: vBody(`"code":"` + prefix + `b2","discountAmount":100,"totalLimit":2147483648,"startsAt":"2026-01-01T00:00:00Z","endsAt":"2030-01-01T00:00:00Z"`), Status: 400, Code: invalid},
		{Name: "voucher discount 2^63", Method: http.MethodPost, Path: admin, Body: vBody(`"code":"` + prefix + `b3","discountAmount":9223372036854775808,"totalLimit":1,"startsAt":"2026-01-01T00:00:00Z","endsAt":"2030-01-01T00:00:00Z"`), Status: 400, Code: invalid},
		{Name: "voucher with usedCount", Method: http.MethodPost, Path: admin, Body: newVoucher(prefix+"b4", `,"usedCount":5`), Status: 400, Code: invalid},
		{Name: "voucher with a date that is not RFC 3339", Method: http.MethodPost, Path: admin, Body: vBody(`"code":"` + prefix + `b5","discountAmount":100,"totalLimit":1,"startsAt":"01/01/2026","endsAt":"2030-01-01T00:00:00Z"`), Status: 400, Code: invalid},
		{Name: "voucher ending after year 9999 in UTC", Method: http.MethodPost, Path: admin, Body: vBody(`"code":"` + prefix + `b6","discountAmount":100,"totalLimit":1,"startsAt":"2026-01-01T00:00:00Z","endsAt":"9999-12-31T23:59:59-23:59"`), Status: 400, Code: invalid},
		{Name: "voucher starting before year 0 in UTC", Method: http.MethodPost, Path: admin, Body: vBody(`"code":"` + prefix + `b7","discountAmount":100,"totalLimit":1,"startsAt":"0000-01-01T00:00:00+01:00","endsAt":"2030-01-01T00:00:00Z"`), Status: 400, Code: invalid},
		{Name: "voucher flashSale as a string", Method: http.MethodPost, Path: admin, Body: newVoucher(prefix+"b8", `,"flashSale":"true"`), Status: 400, Code: invalid},
		{Name: "voucher duplicate code key", Method: http.MethodPost, Path: admin, Body: vBody(`"code":"{x}","code":"` + prefix + `b9","discountAmount":100,"totalLimit":1,"startsAt":"2026-01-01T00:00:00Z","endsAt":"2030-01-01T00:00:00Z"`), Status: 400, Code: invalid},
		{Name: "voucher as an array", Method: http.MethodPost, Path: admin, Body: []byte(`[` + string(newVoucher(prefix+"b10", "")) + `]`), Status: 400, Code: invalid},
		{Name: "voucher 10000 nested", Method: http.MethodPost, Path: admin, Body: httpxtest.Nested(10000, `{"code":`, "}", `"x"`), Status: 400, Code: invalid},
		{Name: "internal write with braces", Method: http.MethodPost, Path: "/internal/vouchers/%7B" + flash + "%7D/reservations",
			Body: httpxtest.Claim("7", `"`+prefix+`-a4"`, "5000"), Status: 400, Code: invalid},
		{Name: "internal write of 17 KiB", Method: http.MethodPost, Path: "/internal/vouchers/" + flash + "/reservations",
			Body: append(httpxtest.Claim("7", `"`+prefix+`-a5"`, "5000"), bytes.Repeat([]byte(" "), 17<<10)...), Status: 400, Code: invalid},
		{Name: "warmup of an encoded code", Method: http.MethodPost, Path: admin + "/" + flash + "%3A/warmup", Status: 400, Code: invalid},
		{Name: "DELETE a voucher", Method: http.MethodDelete, Path: admin + "/" + code, Status: 405, Code: voucher.CodeMethodNotAllowed},
		{Name: "PUT the vouchers", Method: http.MethodPut, Path: admin, Body: newVoucher(prefix+"b11", ""), Status: 405, Code: voucher.CodeMethodNotAllowed},
		{Name: "trailing slash on an admin route", Method: http.MethodGet, Path: admin + "/" + code + "/"},
	}...)
	httpxtest.RunHostile(t, base, token, cases, "/vouchers/"+code+"/reservations/"+order,
		func(tb testing.TB) hostileCounts { return countHostile(tb, l, prefix, l.Gate) })

	flashAfter, _, err := l.Gate.State(context.Background(), flash)
	require.NoError(t, err)
	assert.Equal(t, flashBefore.Remaining, flashAfter.Remaining, "flash voucher's Redis counter")
	assert.Equal(t, flashBefore.Orders, flashAfter.Orders, "flash voucher's Redis orders")

	// A valid write still goes through, exactly once.
	was := l.Counts(t, code)
	r := httpxtest.SendHostile(t, base, token, httpxtest.HostileCase{Method: http.MethodPost, Path: "/vouchers/" + code + "/reservations",
		Body: httpxtest.Claim("2", `"`+prefix+`-last"`, "5000")})
	assert.Equal(t, http.StatusCreated, r.Status, r.Raw)
	assert.Equal(t, ledgertest.DBCounts{Used: was.Used + 1, Rows: was.Rows + 1, Active: was.Active + 1, MaxPerCustomer: 1}, l.Counts(t, code))
}

// TestLedgerSlowHeadersCutOff: a client that sends its headers one byte per
// 100ms is cut off by ReadHeaderTimeout. The default is 5s; the test lowers it
// to keep short, and checks the default is set.
func TestLedgerSlowHeadersCutOff(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{NoRedis: true, Token: "slow-token"})
	h := l.Handler(nil)
	httpxtest.CheckSlowHeadersCutOff(t, h)
}

// TestLedgerTokenNeverLogged runs the real bin/ledger, sends it requests with
// wrong tokens (one the real token without "Bearer", one with a suffix) and
// valid requests that make it log (a flash voucher without Redis: a warning and
// 503s), and checks that neither the real token nor the wrong ones appear in
// its output.
func TestLedgerTokenNeverLogged(t *testing.T) {
	t.Parallel()
	bin := ledgertest.LedgerBinary(t)
	port, err := devstack.FreePort()
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	const token = "s3cret-ledger-token-7f1c2d"
	led, err := devstack.StartService("ledger-logs", bin, []string{
		"LEDGER_ADDR=" + addr, "DATABASE_URL=" + devstacktest.PostgresURL(t), "REDIS_URL=",
		"LEDGER_TOKEN=" + token, "EXPIRY_INTERVAL=1h", "RECONCILE_INTERVAL=1h", "SHUTDOWN_DELAY=0s",
	}, "http://"+addr+"/healthz", devstacktest.ServiceLog(t, "ledger-logs"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = led.Stop() })
	base := "http://" + addr

	prefix := ledgertest.NewCode(t)
	std, flash := prefix+"s", prefix+"f"
	wrong := []string{"Bearer wrong-" + token[:10], "Bearer " + token + "x", token, "Bearer " + strings.ToUpper(token)}
	for _, auth := range wrong {
		r := httpxtest.SendHostile(t, base, token, httpxtest.HostileCase{Method: http.MethodGet, Path: "/admin/vouchers/" + std, Auth: auth})
		assert.Equal(t, http.StatusUnauthorized, r.Status, "auth %q: %s", auth, r.Raw)
	}
	create := func(code string, flash bool) {
		s := ledgertest.Spec(code, 5, 1, flash)
		buf, _ := json.Marshal(s)
		r := httpxtest.SendHostile(t, base, token, httpxtest.HostileCase{Method: http.MethodPost, Path: "/admin/vouchers", Body: buf})
		require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	}
	create(std, false)
	create(flash, true) // logs: created but not loaded into Redis
	r := httpxtest.SendHostile(t, base, token, httpxtest.HostileCase{Method: http.MethodPost, Path: "/vouchers/" + std + "/reservations",
		Body: httpxtest.Claim("1", `"`+prefix+`-o1"`, "5000")})
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	r = httpxtest.SendHostile(t, base, token, httpxtest.HostileCase{Method: http.MethodPost, Path: "/vouchers/" + flash + "/reservations",
		Body: httpxtest.Claim("1", `"`+prefix+`-o2"`, "5000")})
	require.Equal(t, http.StatusServiceUnavailable, r.Status, r.Raw) // logs: request failed
	r = httpxtest.SendHostile(t, base, token, httpxtest.HostileCase{Method: http.MethodPost, Path: "/admin/vouchers/" + flash + "/warmup"})
	require.Equal(t, http.StatusServiceUnavailable, r.Status, r.Raw)

	require.NoError(t, led.Stop()) // flush: every line is in
	logs := led.Logs()
	require.Contains(t, logs, flash, "the ledger's logs should mention the flash voucher; got:\n%s", logs)
	for _, secret := range append([]string{token, token[:16]}, wrong...) {
		if strings.Contains(logs, secret) {
			t.Errorf("ledger logs contain %q:\n%s", secret, logs)
		}
	}
}

// TestLedgerMetricsBoundedUnderHostileMethods: made-up HTTP methods must not
// each grow /metrics by a series (flashgate_http_request_duration_seconds is
// labelled by method), or a client can exhaust the ledger's memory and the
// scraper's.
func TestLedgerMetricsBoundedUnderHostileMethods(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{NoRedis: true})
	h := l.Handler(func(s *web.Server) { s.Token = "" })
	base, _ := httpxtest.Serve(t, h)
	httpxtest.CheckMetricsMethodsBounded(t, base, "/vouchers/x/reservations")
}
