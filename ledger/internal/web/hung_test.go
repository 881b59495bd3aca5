package web_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
	"github.com/flashgate/flashgate/shared/voucher"
)

// TestPostgresStoppedAnswers503Fast reproduces the stopped Postgres
// (SIGSTOP of the postmaster and its backends: connections stay open,
// nothing answers) under steady load on a ledger process with its defaults:
// every request gets an HTTP answer, 503 with Retry-After, within 2 s at p99
// (DB_TIMEOUT per statement and per pool wait); /readyz answers 503 within
// its deadline; once Postgres continues the ledger serves again.
func TestPostgresStoppedAnswers503Fast(t *testing.T) {
	pg := devstacktest.NewPostgres(t, devstack.PostgresOptions{})
	port, err := devstack.FreePort()
	require.NoError(t, err)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	env := []string{"LEDGER_ADDR=" + base[len("http://"):], "DATABASE_URL=" + pg.URL(),
		"REDIS_URL=" + devstacktest.RedisURL(t), devstack.OpenLedger, "EXPIRY_INTERVAL=1h", "RECONCILE_INTERVAL=1h",
		"SHUTDOWN_DELAY=0s"} // no load balancer to wait for: a test's stop is immediate
	led, err := devstack.StartService("ledger", ledgertest.LedgerBinary(t), env, base+"/healthz", devstacktest.ServiceLog(t, "ledger"))
	require.NoError(t, err)
	t.Cleanup(func() { led.Stop() })
	l := &ledgertest.Ledger{URL: base}
	code := ledgertest.NewCode(t)
	// Created, retried as an operator would: the first statements on a new
	// Postgres once passed DB_TIMEOUT beside the rest of make test (503); a
	// retry after an unknown commit finds the voucher there.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		r := l.Call(t, "POST", "/admin/vouchers", ledgertest.Spec(code, 100_000, 1, false))
		if r.Status == http.StatusCreated || r.Code() == voucher.CodeVoucherExists {
			break
		}
		require.True(t, r.Status == http.StatusServiceUnavailable && time.Now().Before(deadline), "create voucher: %d %s", r.Status, r.Raw)
	}
	// A first write on a new Postgres, retried as a client would: on a
	// machine busy with the rest of make test it once took longer than
	// DB_TIMEOUT and was answered 503 (what this test measures comes next).
	var warm ledgertest.Reply
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		warm = l.Call(t, "POST", "/vouchers/"+code+"/reservations", ledgertest.ClaimBody(1, code+"-warm", 500_000))
		if warm.Status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			break
		}
	}
	require.Equal(t, 201, warm.Status, "the first write: %s", warm.Raw)

	require.NoError(t, pg.Pause())
	t.Cleanup(func() { pg.Resume() })
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 20}}
	var mu sync.Mutex
	var took []time.Duration
	statuses := map[string]int{}
	var wg sync.WaitGroup
	end := time.Now().Add(4 * time.Second)
	for w := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(end); i++ {
				st, d := sendOne(c, base, code, w, i)
				mu.Lock()
				took, statuses[st] = append(took, d), statuses[st]+1
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t0 := time.Now()
	ready, err := c.Get(base + "/readyz")
	require.NoError(t, err)
	ready.Body.Close()
	readyTook := time.Since(t0)
	require.NoError(t, pg.Resume())

	slices.Sort(took)
	p99 := took[(len(took)*99+99)/100-1]
	t.Logf("postgres stopped: %d requests, %v, p99 %v, slowest %v; /readyz %d in %v",
		len(took), statuses, p99, took[len(took)-1], ready.StatusCode, readyTook)
	require.Equal(t, map[string]int{"503 1-3": len(took)}, statuses, "every request answered 503 with Retry-After 1-3")
	require.Less(t, p99, 2*time.Second, "p99 with Postgres stopped")
	require.Equal(t, 503, ready.StatusCode)
	require.Less(t, readyTook, 2*time.Second, "/readyz with Postgres stopped (target 1 s)")

	require.Eventually(t, func() bool {
		return l.Call(t, "POST", "/vouchers/"+code+"/reservations", ledgertest.ClaimBody(2, code+"-after", 500_000)).Status == 201
	}, 15*time.Second, 100*time.Millisecond, "the ledger serves again once Postgres continues")
}

// sendOne sends request i of worker w (a reserve, a read or a confirm) and
// returns "status Retry-After" (Retry-After 1-3 as "1-3"; "no answer: ..." when none came) and its time.
func sendOne(c *http.Client, base, code string, w, i int) (string, time.Duration) {
	t0 := time.Now()
	var resp *http.Response
	var err error
	path := base + "/vouchers/" + code + "/reservations"
	switch i % 3 {
	case 0:
		body := fmt.Sprintf(`{"customerId":%d,"orderId":"%s-%d-%d","orderAmount":500000}`, 10+w*10_000+i, code, w, i)
		resp, err = c.Post(path, "application/json", strings.NewReader(body))
	case 1:
		resp, err = c.Get(path + "/" + code + "-warm")
	default:
		resp, err = c.Post(path+"/"+code+"-warm/confirm", "application/json", nil)
	}
	d := time.Since(t0)
	if err != nil {
		return "no answer: " + err.Error(), d
	}
	resp.Body.Close()
	ra := resp.Header.Get("Retry-After")
	if ra == "1" || ra == "2" || ra == "3" {
		ra = "1-3" // drawn per answer (httpx.SetRetryAfter)
	}
	return fmt.Sprintf("%d %s", resp.StatusCode, ra), d
}
