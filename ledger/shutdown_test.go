package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/envconf"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
)

// TestSIGTERMUnderLoad is the cliff: a ledger told to stop while
// flash reserves stream in answers /readyz 503 at once, serves on for
// SHUTDOWN_DELAY, then refuses new connections while the group commits in
// flight (held on a row lock across the moment it stopped accepting) finish:
// every request that reached it gets its 201, none a 503 or a cut
// connection, and the clean stop leaves Redis holding exactly the orders the
// database holds (no hold without its row).
func TestSIGTERMUnderLoad(t *testing.T) {
	t.Parallel()
	db := devstacktest.PostgresURL(t)
	rds := devstacktest.RedisURL(t)
	const delay = time.Second
	lp := ledgertest.StartLedger(t, db, rds, "SHUTDOWN_DELAY="+delay.String(), "SHUTDOWN_TIMEOUT=15s", "DB_TIMEOUT=1500ms",
		"HANGING_GRACE=5s") // room for a write held on the row lock (WRITE_TIMEOUT is capped below the grace)
	l := ledgertest.New(t, ledgertest.Options{DB: db, Redis: rds, Grace: time.Second})
	code := ledgertest.NewCode(t)
	r := ledgertest.Call(t, http.MethodPost, lp.URL+"/admin/vouchers", "", ledgertest.Spec(code, 100_000, 100, true))
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	// lp stops within the test, so its /metrics cannot be read at the end: the
	// audit check of l covers a repair by lp's jobs.
	l.TrackFlash(code)

	hold, release := httpxtest.VoucherLock(t, db, code)
	res := httpxtest.ShutdownLoad{
		URL: lp.URL, Delay: delay, Workers: 32, Warmup: 500 * time.Millisecond,
		Request: func(w, i int) (string, string, any) {
			return http.MethodPost, api.ReservationsPath(code), ledgertest.ClaimBody(int64(1+w*1000+i%1000), fmt.Sprintf("w%d-%d", w, i), 5_000)
		},
		Stop: lp.Stop,
		Hold: hold, Release: release,
	}.Run(t)
	res.Check(t, http.StatusCreated)
	created := res.Count(http.StatusCreated)
	b := l.CheckBooks(t, code)
	assert.Equal(t, created, b.ActiveOrders(), "the database holds %d orders, the clients got %d 201s", b.ActiveOrders(), created)
	ledgertest.CheckRedisMatches(t, l.Gate, b, code)
}

// TestLedgerSettingsRefused: HANGING_GRACE below a second and a
// SHUTDOWN_TIMEOUT without room for a write in flight are refused at start
// (exit 2) with a message naming the variable and the bound; the pair tests
// use (HANGING_GRACE=2s) is valid.
func TestLedgerSettingsRefused(t *testing.T) {
	base := map[string]string{"DATABASE_URL": "postgres://x", "LEDGER_AUTH": "off"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		env  map[string]string
		want []string // in the message; none: valid
	}{
		{with("HANGING_GRACE", "1ns"), []string{"HANGING_GRACE", "at least 1s"}},
		{with("HANGING_GRACE", "999ms"), []string{"HANGING_GRACE", "at least 1s"}},
		{with("HANGING_GRACE", "2s"), nil},
		{with("SHUTDOWN_DELAY", "0s"), nil},
		{with("SHUTDOWN_DELAY", "-1s"), []string{"SHUTDOWN_DELAY", "at least 0s"}},
		{with("SHUTDOWN_DELAY", "20s"), []string{"SHUTDOWN_TIMEOUT (25s)", "SHUTDOWN_DELAY (20s)"}},
		{with("SHUTDOWN_TIMEOUT", "10s"), []string{"SHUTDOWN_TIMEOUT (10s)", "SHUTDOWN_DELAY (5s)"}},
	} {
		_, err := configFrom(envconf.NewFrom(tc.env))
		if tc.want == nil {
			assert.NoError(t, err, "configFrom(%v)", tc.env)
			continue
		}
		if !assert.Error(t, err, "configFrom(%v)", tc.env) {
			continue
		}
		for _, w := range tc.want {
			assert.Contains(t, err.Error(), w, "configFrom(%v)", tc.env)
		}
	}

	// The process itself: exit 2 with the message on stderr.
	cmd := exec.Command(ledgertest.LedgerBinary(t))
	cmd.Env = append(os.Environ(), "DATABASE_URL=postgres://127.0.0.1:1/x", "HANGING_GRACE=1ns")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	assert.Equal(t, 2, exit.ExitCode(), "%s", out)
	assert.True(t, strings.Contains(string(out), "HANGING_GRACE"), "%s", out)
}

// TestLedgerSettingsRoute: GET /internal/settings serves HANGING_GRACE behind
// the token.
func TestLedgerSettingsRoute(t *testing.T) {
	t.Parallel()
	port, err := devstack.FreePort()
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	led, err := devstack.StartService("ledger-settings", ledgertest.LedgerBinary(t), []string{
		"LEDGER_ADDR=" + addr, "DATABASE_URL=" + devstacktest.PostgresURL(t), "REDIS_URL=" + devstacktest.RedisURL(t),
		"LEDGER_TOKEN=settings-token", "HANGING_GRACE=2s", "SHUTDOWN_DELAY=0s",
	}, "http://"+addr+"/healthz", devstacktest.ServiceLog(t, "ledger-settings"))
	require.NoError(t, err)
	t.Cleanup(func() { led.Stop() })
	r := ledgertest.Call(t, http.MethodGet, "http://"+addr+api.SettingsPath, "", nil)
	assert.Equal(t, http.StatusUnauthorized, r.Status, r.Raw)
	r = ledgertest.Call(t, http.MethodGet, "http://"+addr+api.SettingsPath, "settings-token", nil)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	assert.Equal(t, map[string]any{"hangingGrace": "2s"}, r.Body)
}

// TestLedgerReadiness: the ledger is ready while Postgres answers, also with
// its Redis gone (standard vouchers, confirm and release still work).
func TestLedgerReadiness(t *testing.T) {
	t.Parallel()
	rs := devstacktest.NewRedis(t, devstack.RedisOptions{})
	lp := ledgertest.StartLedger(t, devstacktest.PostgresURL(t), rs.URL(), "SHUTDOWN_DELAY=0s")
	r := ledgertest.Call(t, http.MethodGet, lp.URL+"/readyz", "", nil)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	require.NoError(t, rs.Kill())
	start := time.Now()
	r = ledgertest.Call(t, http.MethodGet, lp.URL+"/readyz", "", nil)
	assert.Equal(t, http.StatusOK, r.Status, "/readyz with redis down: %s", r.Raw)
	assert.Less(t, time.Since(start), time.Second)
	code := ledgertest.NewCode(t)
	r = ledgertest.Call(t, http.MethodPost, lp.URL+"/admin/vouchers", "", ledgertest.Spec(code, 10, 1, false))
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	r = ledgertest.Call(t, http.MethodPost, lp.URL+api.ReservationsPath(code), "", ledgertest.ClaimBody(1, "o1", 5_000))
	assert.Equal(t, http.StatusCreated, r.Status, "a standard reserve with redis down: %s", r.Raw)
}
