package ledgertest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

// ledgerPackage is the ledger's command, by import path: the kit serves test
// packages in several directories.
const ledgerPackage = "github.com/flashgate/flashgate/ledger"

// LedgerBinary is bin/ledger built once per test binary, so that tests can
// kill and restart a real ledger process.
func LedgerBinary(tb testing.TB) string {
	tb.Helper()
	return filepath.Join(devstacktest.Binaries(tb, ledgerPackage), "ledger")
}

// Process is a bin/ledger process on the given servers.
type Process struct {
	*devstack.Service
	URL string
}

// StartLedger runs bin/ledger on db and redis without auth, its jobs idle
// (hourly) and a one-second hanging grace unless env says otherwise, and stops
// it when the test ends.
func StartLedger(tb testing.TB, db, redis string, env ...string) *Process {
	tb.Helper()
	port, err := devstack.FreePort()
	require.NoError(tb, err)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	env = append([]string{
		"LEDGER_ADDR=" + addr, "DATABASE_URL=" + db, "REDIS_URL=" + redis, devstack.OpenLedger,
		"EXPIRY_INTERVAL=1h", "RECONCILE_INTERVAL=1h", "HANGING_GRACE=1s", "DB_MAX_CONNS=16",
		"SHUTDOWN_DELAY=0s", // no load balancer to wait for: a test's stop is immediate
	}, env...)
	svc, err := devstack.StartService("ledger", LedgerBinary(tb), env, "http://"+addr+"/healthz", devstacktest.ServiceLog(tb, "ledger"))
	require.NoError(tb, err)
	tb.Cleanup(func() { svc.Stop() })
	return &Process{Service: svc, URL: "http://" + addr}
}

// TryCall is call for a server that may be down: a failed exchange is returned,
// not reported.
func TryCall(method, url string, body any) (Reply, error) {
	var rd io.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		if err != nil {
			return Reply{}, err
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return Reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := HTTPClient.Do(req)
	if err != nil {
		return Reply{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return Reply{}, err
	}
	r := Reply{Status: resp.StatusCode, Raw: string(raw)}
	_ = json.Unmarshal(raw, &r.Body)
	return r, nil
}
