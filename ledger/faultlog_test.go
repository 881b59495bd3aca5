package main

import (
	"bytes"
	"encoding/json"
	"fmt"
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

// TestFaultLoggedOnce runs bin/ledger on a Postgres of its own, stops that
// Postgres, and checks that every 503 the ledger then answers leaves exactly
// one log line with the request id: one for the reserve route, one per claim
// for the batch route (which answers each claim on its own). The token never
// shows.
func TestFaultLoggedOnce(t *testing.T) {
	t.Parallel()
	pg := devstacktest.NewPostgres(t, devstack.PostgresOptions{})
	port, err := devstack.FreePort()
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	const token = "faultlog-ledger-token-93ad"
	var logs httpxtest.LogBuffer
	led, err := devstack.StartService("ledger-faultlog", ledgerBinary(t), []string{
		"LEDGER_ADDR=" + addr, "DATABASE_URL=" + pg.URL(), "REDIS_URL=",
		"LEDGER_TOKEN=" + token, "EXPIRY_INTERVAL=1h", "RECONCILE_INTERVAL=1h",
	}, "http://"+addr+"/healthz", &logs)
	require.NoError(t, err)
	t.Cleanup(func() { _ = led.Stop() })
	base := "http://" + addr

	code := newCode(t)
	status, _ := probe(t, base+"/admin/vouchers", token, "", spec(code, 5, 1, false))
	require.Equal(t, http.StatusCreated, status)
	require.NoError(t, pg.Stop())

	status, body := probe(t, base+httpx.ReservationsPath(code), token, "probe-503-xyz", claimBody(1, code+"-o1", 5_000))
	require.Equal(t, http.StatusServiceUnavailable, status, "reserve with Postgres stopped: %s", body)

	claims := []any{claimBody(2, code+"-o2", 5_000), claimBody(3, code+"-o3", 5_000)}
	status, body = probe(t, base+httpx.InternalPrefix+httpx.ReservationsPath(code)+"/batch", token, "probe-503-batch",
		map[string]any{"claims": claims})
	var batch struct{ Results []struct{ Status int } }
	unavailable := 0
	if status == http.StatusOK {
		require.NoError(t, json.Unmarshal(body, &batch), "%s", body)
		for _, r := range batch.Results {
			if r.Status == http.StatusServiceUnavailable {
				unavailable++
			}
		}
	} else {
		require.Equal(t, http.StatusServiceUnavailable, status, "batch with Postgres stopped: %s", body)
		unavailable = 1
	}
	require.NotZero(t, unavailable, "batch with Postgres stopped answered no 503: %s", body)

	require.NoError(t, led.Stop()) // flush: every line is in
	assert.Len(t, logs.Lines("probe-503-xyz"), 1, "log lines with the request id of one 503:\n%s", logs.String())
	assert.Len(t, logs.Lines("probe-503-batch"), unavailable, "log lines with the request id of a batch with %d 503s:\n%s",
		unavailable, logs.String())
	assert.NotContains(t, logs.String(), token)
}

// probe POSTs body as JSON with the token and request id and returns the
// status and body.
func probe(tb testing.TB, url, token, requestID string, body any) (int, []byte) {
	tb.Helper()
	buf, err := json.Marshal(body)
	require.NoError(tb, err)
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(buf))
	require.NoError(tb, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	if requestID != "" {
		req.Header.Set(httpx.RequestIDHeader, requestID)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	require.NoError(tb, err)
	defer resp.Body.Close()
	var out bytes.Buffer
	_, err = out.ReadFrom(resp.Body)
	require.NoError(tb, err)
	return resp.StatusCode, out.Bytes()
}
