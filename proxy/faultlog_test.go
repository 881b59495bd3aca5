package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/devstack"
	"github.com/flashgate/flashgate/shared/devstack/devstacktest"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/httpx/httpxtest"
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
	require.NoError(t, rs.Kill())

	status, body := probeReserve(t, s.ProxyURL, code, probeID)
	require.Equal(t, http.StatusServiceUnavailable, status, "reserve with Redis killed: %s", body)
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

	status, body := probeReserve(t, s.ProxyURL, newCode(t), probeID)
	require.Equal(t, http.StatusServiceUnavailable, status, "reserve with no ledger: %s", body)
	lines := logs.Lines(probeID)
	require.Len(t, lines, 1, "log lines with the request id of one 503:\n%s", logs.String())
	assert.Contains(t, lines[0], "ledger", "the line carries the cause")
	assert.NotContains(t, logs.String(), "test-token")
}

// probeReserve sends one reserve to the proxy with the request id and returns
// the status and body.
func probeReserve(tb testing.TB, proxyURL, code, requestID string) (int, []byte) {
	tb.Helper()
	buf, err := json.Marshal(map[string]any{"customerId": 1, "orderId": code + "-probe", "orderAmount": 5_000})
	require.NoError(tb, err)
	req, err := http.NewRequest(http.MethodPost, proxyURL+httpx.ReservationsPath(code), bytes.NewReader(buf))
	require.NoError(tb, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(httpx.RequestIDHeader, requestID)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	require.NoError(tb, err)
	defer resp.Body.Close()
	var out bytes.Buffer
	_, err = out.ReadFrom(resp.Body)
	require.NoError(tb, err)
	return resp.StatusCode, out.Bytes()
}

// TestForwardBatchFitsLedgerRoute: the proxy's admitted-write batches stay
// within what the ledger's batch route accepts, in claims and in bytes (the
// longest orderIds and largest numbers a claim may hold).
func TestForwardBatchFitsLedgerRoute(t *testing.T) {
	if maxForwardBatch > httpx.MaxBatchClaims {
		t.Fatalf("maxForwardBatch = %d, want at most httpx.MaxBatchClaims = %d", maxForwardBatch, httpx.MaxBatchClaims)
	}
	claims := make([]map[string]any, maxForwardBatch)
	for i := range claims {
		claims[i] = map[string]any{"customerId": int64(1<<63 - 1), "orderId": string(bytes.Repeat([]byte("o"), 64)),
			"orderAmount": int64(1 << 50)}
	}
	buf, err := json.Marshal(map[string]any{"claims": claims})
	require.NoError(t, err)
	if len(buf) > httpx.MaxBatchBytes {
		t.Fatalf("a batch of %d claims takes %d bytes, want at most httpx.MaxBatchBytes = %d", maxForwardBatch, len(buf), httpx.MaxBatchBytes)
	}
}
