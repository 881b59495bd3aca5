package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
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
	led, err := devstack.StartService("ledger-faultlog", ledgertest.LedgerBinary(t), []string{
		"LEDGER_ADDR=" + addr, "DATABASE_URL=" + pg.URL(), "REDIS_URL=",
		"LEDGER_TOKEN=" + token, "EXPIRY_INTERVAL=1h", "RECONCILE_INTERVAL=1h", "SHUTDOWN_DELAY=0s",
	}, "http://"+addr+"/healthz", &logs)
	require.NoError(t, err)
	t.Cleanup(func() { _ = led.Stop() })
	base := "http://" + addr

	code := ledgertest.NewCode(t)
	r := httpxtest.Call(t, http.DefaultClient, http.MethodPost, base+"/admin/vouchers", token, ledgertest.Spec(code, 5, 1, false))
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	require.NoError(t, pg.Stop())

	r = httpxtest.Call(t, httpxtest.RequestIDClient("probe-503-xyz"), http.MethodPost, base+api.ReservationsPath(code),
		token, ledgertest.ClaimBody(1, code+"-o1", 5_000))
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "reserve with Postgres stopped: %s", r.Raw)

	claims := []any{ledgertest.ClaimBody(2, code+"-o2", 5_000), ledgertest.ClaimBody(3, code+"-o3", 5_000)}
	r = httpxtest.Call(t, httpxtest.RequestIDClient("probe-503-batch"), http.MethodPost,
		base+api.InternalPrefix+api.ReservationsPath(code)+"/batch", token, map[string]any{"claims": claims})
	status, body := r.Status, []byte(r.Raw)
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
