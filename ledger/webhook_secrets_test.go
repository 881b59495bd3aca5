package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
)

// TestWebhookSecretsNeverLeave runs bin/ledger with two webhook URLs that
// carry secrets in their query string and user info, one on a closed port
// (Go's *url.Error names the whole URL) and one answering 500, lets every
// event be parked as failed, and sweeps every log line (at debug) and every
// answer that could show a delivery's failure for the secrets: the parked
// events (last_error, sink), the feed, the metrics' sink labels. The failures
// still say why (refused, 500).
func TestWebhookSecretsNeverLeave(t *testing.T) {
	t.Parallel()
	const token = "secrets-ledger-token-5be1"
	secrets := []string{"SECRETCLOSED", "SECRET500", "hookuser", "hookpa55", "sig=0xfeed"}
	closedPort, release, err := devstack.ClosedPort()
	require.NoError(t, err)
	t.Cleanup(release)
	closed := fmt.Sprintf("http://hookuser:hookpa55@127.0.0.1:%d/hook?token=SECRETCLOSED&sig=0xfeed", closedPort)
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(failing.Close)
	answers500 := strings.Replace(failing.URL, "http://", "http://hookuser:hookpa55@", 1) + "/hook?token=SECRET500"

	port, err := devstack.FreePort()
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	var logs httpxtest.LogBuffer
	led, err := devstack.StartService("ledger-secrets", ledgertest.LedgerBinary(t), []string{
		"LEDGER_ADDR=" + addr, "DATABASE_URL=" + ledgertest.NewEventsDB(t), "REDIS_URL=", "LEDGER_TOKEN=" + token, "LOG_LEVEL=debug",
		"EXPIRY_INTERVAL=1h", "RECONCILE_INTERVAL=1h", "SHUTDOWN_DELAY=0s",
		"WEBHOOK_URLS=" + closed + "," + answers500, "WEBHOOK_SECRET=" + ledgertest.TestSecret,
		"WEBHOOK_MAX_ATTEMPTS=2", "WEBHOOK_BACKOFF=20ms", "WEBHOOK_BACKOFF_MAX=100ms", "WEBHOOK_TIMEOUT=2s",
	}, "http://"+addr+"/healthz", &logs)
	require.NoError(t, err)
	t.Cleanup(func() { _ = led.Stop() })
	base := "http://" + addr
	get := func(path string) httpxtest.Reply {
		return httpxtest.Call(t, http.DefaultClient, http.MethodGet, base+path, token, nil)
	}

	code := ledgertest.NewCode(t)
	r := httpxtest.Call(t, http.DefaultClient, http.MethodPost, base+"/admin/vouchers", token, ledgertest.Spec(code, 5, 1, false))
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	var failed httpxtest.Reply
	ledgertest.WaitFor(t, 30*time.Second, "the voucher's event parked by both sinks", func() bool {
		failed = get("/admin/events?status=failed")
		return failed.Status == http.StatusOK && strings.Count(failed.Raw, `"status":"FAILED"`) == 2
	})
	assert.Contains(t, failed.Raw, "connection refused", "the closed port's failure says why")
	assert.Contains(t, failed.Raw, "500", "the failing receiver's failure says why")

	answers := map[string]string{"GET /admin/events?status=failed": failed.Raw}
	for _, path := range []string{"/admin/events?status=retry", "/admin/events", api.MetricsPath} {
		answers["GET "+path] = get(path).Raw
	}
	require.NoError(t, led.Stop()) // every line is in
	answers["the log"] = logs.String()
	require.Contains(t, answers["the log"], "event parked as failed", "the sweep covers the parked events' log lines")
	for what, text := range answers {
		for _, s := range secrets {
			assert.NotContains(t, text, s, "%s shows a webhook URL's secret", what)
		}
	}
}
