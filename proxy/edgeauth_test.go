package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

// TestEdgeAuthAtStart: bin/proxy without PROXY_TOKEN or PROXY_TOKENS refuses
// to start (exit 2, naming both and PROXY_AUTH); with PROXY_AUTH=off it starts
// and says so at WARN.
func TestEdgeAuthAtStart(t *testing.T) {
	t.Parallel()
	port, err := devstack.FreePort()
	require.NoError(t, err)
	cmd := exec.Command(proxyBinary(t))
	cmd.Env = append(os.Environ(), fmt.Sprintf("PROXY_ADDR=127.0.0.1:%d", port), "REDIS_URL=redis://127.0.0.1:1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	assert.Equal(t, 2, exit.ExitCode(), "%s", out)
	for _, want := range []string{"PROXY_TOKEN", "PROXY_TOKENS", "PROXY_AUTH=off"} {
		assert.Contains(t, string(out), want)
	}

	o := stackOptions{redisURL: devstacktest.RedisURL(t), dbURL: devstacktest.PostgresURL(t)}
	_, ledgerURL := startLedgerEnv(t, o, "SHUTDOWN_DELAY=0s")
	svc, _ := startProxyProcess(t, o.redisURL, ledgerURL, "SHUTDOWN_DELAY=0s") // proxyEnv: PROXY_AUTH=off
	assert.Regexp(t, `"level":"WARN","msg":"PROXY_AUTH=off: the edge takes requests without a token`, svc.Logs())
}

// TestEdgeWithScopedTokens runs the ledger and bin/proxy as an operator would
// with scoped credentials: the proxy's LEDGER_TOKEN holds internal only, its
// clients shop (reserve) and payments (settle), /metrics on METRICS_ADDR. The
// proxy starts (its settings check passes), reserves flash and standard
// vouchers (terms, the batch route, the relayed standard reserve), reads and
// settles through the ledger; each client is 403 outside its scope; the
// proxy's internal token cannot use the ledger's admin routes; /metrics is
// on its own listener only.
func TestEdgeWithScopedTokens(t *testing.T) {
	t.Parallel()
	o := stackOptions{redisURL: devstacktest.RedisURL(t), dbURL: devstacktest.PostgresURL(t)}
	const internal, shop, pay = "proxy-internal-token", "shop-token", "payments-token"
	_, ledgerURL := startLedgerEnv(t, o, "SHUTDOWN_DELAY=0s", "LEDGER_TOKENS=proxy:"+internal+":internal")
	port, err := devstack.FreePort()
	require.NoError(t, err)
	metricsPort, err := devstack.FreePort()
	require.NoError(t, err)
	addr, metricsAddr := fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("127.0.0.1:%d", metricsPort)
	svc, err := devstack.StartService("proxy", proxyBinary(t), []string{
		"PROXY_ADDR=" + addr, "REDIS_URL=" + o.redisURL, "LEDGER_URL=" + ledgerURL, "LEDGER_TOKEN=" + internal,
		"PROXY_TOKENS=shop:" + shop + ":reserve,payments:" + pay + ":settle", "METRICS_ADDR=" + metricsAddr,
		"SHUTDOWN_DELAY=0s",
	}, "http://"+addr+"/healthz", devstacktest.ServiceLog(t, "proxy"))
	require.NoError(t, err)
	t.Cleanup(func() { svc.Stop() })
	proxyURL := "http://" + addr

	for _, flash := range []bool{true, false} {
		code := newCode(t)
		require.Equal(t, http.StatusCreated, call(t, "POST", ledgerURL+"/admin/vouchers", "test-token", voucherBody(code, 5, 1, flash)).Status)
		reservations := proxyURL + "/vouchers/" + code + "/reservations"
		order := code + "-o1" // order ids are unique across vouchers
		claim := map[string]any{"customerId": 7, "orderId": order, "orderAmount": 5_000}
		assert.Equal(t, http.StatusForbidden, call(t, "POST", reservations, pay, claim).Status, "flash=%v: payments cannot reserve", flash)
		r := call(t, "POST", reservations, shop, claim)
		require.Equal(t, http.StatusCreated, r.Status, "flash=%v: %s", flash, r.Raw)
		assert.Equal(t, http.StatusOK, call(t, "GET", reservations+"/"+order, shop, nil).Status, "flash=%v", flash)
		assert.Equal(t, http.StatusForbidden, call(t, "GET", reservations+"/"+order, pay, nil).Status, "flash=%v", flash)
		assert.Equal(t, http.StatusForbidden, call(t, "POST", reservations+"/"+order+"/confirm", shop, nil).Status, "flash=%v: shop cannot confirm", flash)
		assert.Equal(t, http.StatusOK, call(t, "POST", reservations+"/"+order+"/confirm", pay, nil).Status, "flash=%v", flash)
		assert.Equal(t, http.StatusOK, call(t, "POST", reservations+"/"+order+"/refund", pay, nil).Status, "flash=%v", flash)
		assert.Equal(t, http.StatusUnauthorized, call(t, "GET", reservations+"/"+order, internal, nil).Status, "the ledger's token is no client token")

		// The proxy's ledger token reaches what a proxy needs, nothing else.
		assert.Equal(t, http.StatusOK, call(t, "GET", ledgerURL+"/admin/vouchers/"+code, internal, nil).Status)
		for _, c := range []struct{ method, path string }{
			{"GET", "/admin/vouchers"}, {"GET", "/admin/vouchers/" + code + "/reservations.csv"},
			{"PATCH", "/admin/vouchers/" + code}, {"POST", "/admin/vouchers/" + code + "/pause"}, {"GET", "/admin/events"},
		} {
			r := call(t, c.method, ledgerURL+c.path, internal, map[string]any{"discountAmount": 100_000_000})
			assert.Equal(t, http.StatusForbidden, r.Status, "%s %s with the proxy's token: %s", c.method, c.path, r.Raw)
		}
	}

	assert.Equal(t, http.StatusNotFound, call(t, "GET", proxyURL+"/metrics", "", nil).Status, "/metrics left the main listener")
	m := call(t, "GET", "http://"+metricsAddr+"/metrics", "", "")
	assert.Equal(t, http.StatusOK, m.Status)
	assert.Contains(t, m.Raw, "flashgate_")
}
