package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/checkout"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
	"github.com/flashgate/flashgate/shared/voucher"
)

// The proxy's keys: k2 signs now, k1 was rotated out of signing but still
// verifies.
const (
	currentSecret = "current-secret-0123456789"
	rotatedSecret = "rotated-secret-9876543210"
)

// reserveWithToken reserves 5,000 through the proxy with X-Checkout-Token
// (none when token is ""), and returns the status and the error code. A 503
// is retried with the same orderId, as the API asks of every client: a
// standard voucher's reserves wait for one of MAX_INFLIGHT_PER_VOUCHER slots
// and a loaded machine sheds some.
func (s *stack) reserveWithToken(tb testing.TB, code string, customer int64, order, token string) (int, string) {
	tb.Helper()
	for range 100 {
		st, c := s.reserveOnce(tb, code, customer, order, token)
		if st != http.StatusServiceUnavailable {
			return st, c
		}
		time.Sleep(50 * time.Millisecond)
	}
	return http.StatusServiceUnavailable, voucher.CodeUnavailable
}

func (s *stack) reserveOnce(tb testing.TB, code string, customer int64, order, token string) (int, string) {
	tb.Helper()
	body, _ := json.Marshal(map[string]any{"customerId": customer, "orderId": order, "orderAmount": 5_000})
	req, err := http.NewRequest(http.MethodPost, s.ProxyURL+api.ReservationsPath(code), bytes.NewReader(body))
	require.NoError(tb, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set(api.HeaderCheckoutToken, token)
	}
	resp, err := client.Do(req)
	require.NoError(tb, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e api.ErrorBody
	_ = json.Unmarshal(raw, &e)
	return resp.StatusCode, e.Error
}

// waitTerms waits until the proxy's terms of code require a checkout token
// (want) or not: the ledger publishes a change, and the watcher drops the
// cached terms.
func (s *stack) waitTerms(tb testing.TB, code string, want bool) {
	tb.Helper()
	require.Eventually(tb, func() bool {
		v, err := s.admit.Voucher(context.Background(), code)
		return err == nil && v.RequireCheckoutToken == want
	}, 10*time.Second, 10*time.Millisecond, "the proxy's terms of %s never had requireCheckoutToken %v", code, want)
}

// TestCheckoutToken: a voucher PATCHed to require a checkout token is
// reserved, through the proxy, only with a valid one. Many customers at once
// send no token (403 CHECKOUT_TOKEN_REQUIRED), a bad one (expired, another
// voucher's, another customer's, an unknown key's, malformed: 403
// CHECKOUT_TOKEN_INVALID) or a valid one, signed with the current or the
// rotated key (201); exactly the valid ones hold a use, in Postgres and in
// Redis, and the refused ones wrote nothing. A proxy without
// CHECKOUT_TOKEN_SECRET refuses the voucher's reserves with 403
// CHECKOUT_TOKEN_UNCONFIGURED. PATCHed back, no token is needed.
func TestCheckoutToken(t *testing.T) {
	t.Parallel()
	for _, flash := range []bool{true, false} {
		t.Run(fmt.Sprintf("flash=%v", flash), func(t *testing.T) {
			t.Parallel()
			testCheckoutToken(t, flash)
		})
	}
}

func testCheckoutToken(t *testing.T, flash bool) {
	keys, err := checkout.ParseKeys("k2:" + currentSecret + ",k1:" + rotatedSecret)
	require.NoError(t, err)
	s := newStack(t, stackOptions{coalesce: true, checkoutKeys: keys})
	code, other := newCode(t), newCode(t)
	const limit = 1_000
	s.createVoucher(t, code, limit, 1, flash)
	st, _ := s.reserveWithToken(t, code, 1, code+"-open", "")
	require.Equal(t, http.StatusCreated, st, "a reserve without a token before the PATCH")

	r := s.admin(t, http.MethodPatch, "/admin/vouchers/"+code, map[string]any{"requireCheckoutToken": true})
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	assert.Equal(t, true, r.Body["requireCheckoutToken"], "the PATCH's view")
	s.waitTerms(t, code, true)

	rotated := checkout.Key{ID: "k1", Secret: []byte(rotatedSecret)}
	unknown := checkout.Key{ID: "k0", Secret: []byte(rotatedSecret)}
	soon, past := time.Now().Add(time.Minute), time.Now().Add(-time.Second)
	kinds := []struct {
		name  string
		token func(customer int64) string
		code  string // "" for 201
	}{
		{"valid", func(c int64) string { return keys.Mint(code, c, soon) }, ""},
		{"valid, rotated key", func(c int64) string { return checkout.Mint(rotated, code, c, soon) }, ""},
		{"missing", func(int64) string { return "" }, voucher.CodeCheckoutTokenRequired},
		{"expired", func(c int64) string { return keys.Mint(code, c, past) }, voucher.CodeCheckoutTokenInvalid},
		{"other voucher", func(c int64) string { return keys.Mint(other, c, soon) }, voucher.CodeCheckoutTokenInvalid},
		{"other customer", func(c int64) string { return keys.Mint(code, c+1, soon) }, voucher.CodeCheckoutTokenInvalid},
		{"unknown key", func(c int64) string { return checkout.Mint(unknown, code, c, soon) }, voucher.CodeCheckoutTokenInvalid},
		{"malformed", func(int64) string { return "v1.k2.not-a-token" }, voucher.CodeCheckoutTokenInvalid},
	}
	const perKind = 25
	type answer struct {
		status int
		code   string
	}
	answers := make([][]answer, len(kinds))
	var wg sync.WaitGroup
	for k, kind := range kinds {
		answers[k] = make([]answer, perKind)
		for i := range perKind {
			customer := int64(1000*(k+1) + i)
			wg.Go(func() {
				st, c := s.reserveWithToken(t, code, customer, fmt.Sprintf("%s-k%d-%d", code, k, i), kind.token(customer))
				answers[k][i] = answer{st, c}
			})
		}
	}
	wg.Wait()
	admitted := 1 // the reserve before the PATCH
	for k, kind := range kinds {
		want := answer{http.StatusForbidden, kind.code}
		if kind.code == "" {
			want = answer{http.StatusCreated, ""}
			admitted += perKind
		}
		for i, got := range answers[k] {
			assert.Equal(t, want, got, "%s reserve %d", kind.name, i)
		}
	}
	assert.Equal(t, admitted, s.rows(t, code), "reservation rows: the refused reserves wrote nothing")
	assert.Equal(t, dbState{Used: admitted, Active: admitted, MaxPerCustomer: 1, Remaining: limit - admitted}, s.db(t, code))
	if flash {
		assert.EqualValues(t, limit-admitted, s.redisRemaining(t, code), "redis remaining")
	}

	// A proxy that cannot verify tokens refuses the voucher, writing nothing,
	// and says so once.
	var logs httpxtest.LogBuffer
	bare := startProxy(t, stackOptions{redisURL: devstacktest.RedisURL(t), coalesce: true,
		admitLog: slog.New(slog.NewJSONHandler(&logs, nil))}, s.LedgerURL)
	for i := range 3 {
		customer := int64(90 + i)
		st, c := bare.reserveWithToken(t, code, customer, fmt.Sprintf("%s-bare-%d", code, i), keys.Mint(code, customer, soon))
		assert.Equal(t, http.StatusForbidden, st)
		assert.Equal(t, voucher.CodeCheckoutTokenUnconfigured, c)
	}
	assert.Equal(t, admitted, s.rows(t, code), "reservation rows after the unverifiable reserves")
	assert.Equal(t, 1, strings.Count(logs.String(), "CHECKOUT_TOKEN_SECRET is not set"), "log lines:\n%s", logs.String())

	r = s.admin(t, http.MethodPatch, "/admin/vouchers/"+code, map[string]any{"requireCheckoutToken": false})
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	s.waitTerms(t, code, false)
	st, _ = s.reserveWithToken(t, code, 2, code+"-open-again", "")
	assert.Equal(t, http.StatusCreated, st, "a reserve without a token after the PATCH back")
}
