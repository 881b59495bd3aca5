package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
)

// probeID is the request id the fault tests send and count in the logs.
const probeID = "probe-503-xyz"

// TestFaultLoggedOnceRedisDown: a reserve of a flash voucher whose Redis is
// gone is answered 503 and leaves exactly one proxy log line with its request
// id, carrying the cause.
func TestFaultLoggedOnceRedisDown(t *testing.T) {
	t.Parallel()
	rs := devstacktest.NewRedis(t, devstack.RedisOptions{})
	var logs httpxtest.LogBuffer
	s := newStack(t, stackOptions{redisURL: rs.URL(), coalesce: true,
		log: slog.New(slog.NewJSONHandler(&logs, nil))})
	code := newCode(t)
	s.createVoucher(t, code, 10, 1, true)
	// Exempt from the agreement check: Redis is killed for good, there is no
	// Redis state left to compare.
	s.noAgreement("redis is killed and never restarted")
	require.NoError(t, rs.Kill())

	r := probeReserve(t, s.ProxyURL, code)
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "reserve with Redis killed: %s", r.Raw)
	lines := logs.Lines(probeID)
	require.Len(t, lines, 1, "log lines with the request id of one 503:\n%s", logs.String())
	assert.Contains(t, lines[0], "redis", "the line carries the cause")
	assert.Contains(t, lines[0], `"route":"/vouchers/:code/reservations"`)
}

// TestFaultLoggedOnceLedgerDown: a proxy whose ledger does not answer (here:
// nothing listens on its port) answers 503 with exactly one log line.
func TestFaultLoggedOnceLedgerDown(t *testing.T) {
	t.Parallel()
	port, err := devstack.FreePort()
	require.NoError(t, err)
	var logs httpxtest.LogBuffer
	s := startProxy(t, stackOptions{redisURL: devstacktest.RedisURL(t), coalesce: true,
		log: slog.New(slog.NewJSONHandler(&logs, nil))}, fmt.Sprintf("http://127.0.0.1:%d", port))

	r := probeReserve(t, s.ProxyURL, newCode(t))
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "reserve with no ledger: %s", r.Raw)
	lines := logs.Lines(probeID)
	require.Len(t, lines, 1, "log lines with the request id of one 503:\n%s", logs.String())
	assert.Contains(t, lines[0], "ledger", "the line carries the cause")
	assert.NotContains(t, logs.String(), "test-token")
}

// probeReserve sends one reserve to the proxy with the request id probeID.
func probeReserve(tb testing.TB, proxyURL, code string) reply {
	tb.Helper()
	return httpxtest.Call(tb, httpxtest.RequestIDClient(probeID), http.MethodPost, proxyURL+api.ReservationsPath(code), "",
		map[string]any{"customerId": 1, "orderId": code + "-probe", "orderAmount": 5_000})
}
