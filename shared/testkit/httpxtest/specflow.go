package httpxtest

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/client"
	"github.com/flashgate/flashgate/shared/voucher"
)

// CheckLiveResponses sends one order's life through shared/client to the
// service at base (a reserve, its replay and conflicts, get, confirm, a
// refused release, refund, errors of every kind, the open routes) and
// validates every answer against openapi.yaml with kin-openapi: documented
// status, headers (Location, WWW-Authenticate, Retry-After) and body schema.
// code is a live voucher of at least 1 use and perUserLimit 1 whose minimum
// order is at most 5,000; admin creates it.
func CheckLiveResponses(tb testing.TB, base, token, code string) {
	tb.Helper()
	spec := NewSpecChecker(tb, base)
	h := &http.Client{Timeout: 10 * time.Second, Transport: spec.Transport(nil)}
	c := client.New(base, client.WithToken(token), client.WithHTTPClient(h), client.WithRetryFor(0))
	ctx := tb.Context()
	claim := voucher.Claim{CustomerID: 1, OrderID: code + "-live", OrderAmount: 5_000}
	must := func(err error, want string) {
		tb.Helper()
		if got := voucher.ErrorCode(err); got != want {
			tb.Errorf("got %v, want code %q", err, want)
		}
	}
	_, err := c.Reserve(ctx, code, claim)
	must(err, "")
	_, err = c.Reserve(ctx, code, claim)
	must(err, "")
	_, err = c.Reserve(ctx, code, voucher.Claim{CustomerID: 2, OrderID: claim.OrderID, OrderAmount: 5_000})
	must(err, voucher.CodeOrderConflict)
	_, err = c.Reserve(ctx, "NOPE-"+code, claim)
	must(err, voucher.CodeVoucherNotFound)
	_, err = c.Get(ctx, code, claim.OrderID)
	must(err, "")
	_, err = c.Get(ctx, code, "nobody")
	must(err, voucher.CodeReservationNotFound)
	_, err = c.Confirm(ctx, code, claim.OrderID)
	must(err, "")
	must(c.Release(ctx, code, claim.OrderID), voucher.CodeAlreadyConfirmed)
	_, err = c.Refund(ctx, code, claim.OrderID)
	must(err, "")
	_, err = c.Confirm(ctx, code, claim.OrderID)
	must(err, voucher.CodeReservationRefunded)
	if token != "" {
		_, err = client.New(base, client.WithHTTPClient(h)).Get(ctx, code, claim.OrderID)
		must(err, voucher.CodeUnauthorized)
	}
	for _, path := range []string{api.HealthzPath, api.ReadyzPath, api.OpenAPIPath} {
		resp, err := h.Get(base + path)
		if err != nil {
			tb.Errorf("GET %s: %v", path, err)
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if n := len(spec.Checked()); n < 12 {
		tb.Errorf("validated %d kinds of answers, want at least 12: %v", n, spec.Checked())
	}
}
