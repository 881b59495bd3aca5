package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/proxy/internal/admit"
	"github.com/flashgate/flashgate/proxy/internal/edge"
	"github.com/flashgate/flashgate/proxy/internal/ledger"
	"github.com/flashgate/flashgate/proxy/internal/limits"
	"github.com/flashgate/flashgate/shared/checkout"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/testkit/agreementtest"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode) // as main sets release mode: no route listing on stdout
	// go-redis's own lines (the failed dials of tests that stop Redis) go
	// where main sends them, the JSON log: here, nowhere.
	redis.SetLogger(gate.NewLogger(slog.New(slog.DiscardHandler)))
	os.Exit(devstacktest.RunTests(m))
}

// ledgerBinary is bin/ledger built once per test binary: the proxy is tested
// against the real ledger process.
func ledgerBinary(tb testing.TB) string {
	tb.Helper()
	return filepath.Join(devstacktest.Binaries(tb, "../ledger"), "ledger")
}

// stack is a real ledger process and an in-process proxy over real servers.
type stack struct {
	ProxyURL  string
	LedgerURL string
	Ledger    *devstack.Service
	admit     *admit.Admitter
	gate      *gate.Gate
	rdb       redis.UniversalClient
	pool      *pgxpool.Pool
	checks    *agreementtest.Checks
	tap       *ledgerTap           // the proxy's ledger calls, when stackOptions.tap
	limits    *limits.Limits       // nil: the stack was started without
	ledger    *ledger.Client       // the proxy's client of the ledger
	reg       *prometheus.Registry // the proxy's admission and limits metrics
	watcher   *gate.Watcher        // the proxy's change watcher
}

type stackOptions struct {
	redisURL, dbURL string
	soldOutTTL      time.Duration
	coalesce        bool
	log             *slog.Logger     // the proxy's server log; nil: discarded
	redisHook       redis.Hook       // added to the proxy's Redis client: a seam to inject faults at
	codesRefresh    time.Duration    // LIVE_CODES_REFRESH; 0: every unknown code re-reads the set
	codesClock      func() time.Time // the set of codes' clock; nil: time.Now
	lookups         int              // LEDGER_LOOKUPS; 0: 8
	lookupURL       string           // where the proxy sends its ledger calls; "": the ledger
	tap             bool             // newStack: the proxy calls the ledger through a ledgerTap
	tapDelay        time.Duration    // the tap holds each voucher lookup this long
	checkoutKeys    checkout.Keys
	admitLog        *slog.Logger   // the admitter's log; nil: discarded
	limits          *limits.Config // per-client limits and early retries; nil: none
	maxInflight     int            // MAX_INFLIGHT, shed at once over it (no LATENCY_SLO); 0: no bound
	ledgerEnv       []string       // more of the ledger process's environment
}

func newStack(tb testing.TB, o stackOptions) *stack {
	tb.Helper()
	if o.redisURL == "" {
		o.redisURL = devstacktest.RedisURL(tb)
	}
	if o.dbURL == "" {
		o.dbURL = devstacktest.PostgresURL(tb)
	}
	led, ledgerURL := startLedger(tb, o)
	var tap *ledgerTap
	if o.tap {
		tap = newLedgerTap(tb, ledgerURL, o.tapDelay)
		o.lookupURL = tap.URL
	}
	p := startProxy(tb, o, ledgerURL)
	p.tap = tap
	pool, err := pgxpool.New(context.Background(), o.dbURL)
	require.NoError(tb, err)
	tb.Cleanup(pool.Close)
	p.Ledger, p.pool = led, pool
	tb.Cleanup(func() { p.requireAgreement(tb) }) // while the ledger process serves
	return p
}

// startLedger runs a bin/ledger process on o's servers.
func startLedger(tb testing.TB, o stackOptions) (*devstack.Service, string) {
	tb.Helper()
	port, err := devstack.FreePort()
	require.NoError(tb, err)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	env := []string{
		"LEDGER_ADDR=" + addr, "DATABASE_URL=" + o.dbURL, "REDIS_URL=" + o.redisURL,
		"LEDGER_TOKEN=test-token", "EXPIRY_INTERVAL=1h", "RECONCILE_INTERVAL=1h",
		"SHUTDOWN_DELAY=0s", // no load balancer to wait for: a test's stop is immediate
	}
	env = append(env, o.ledgerEnv...)
	led, err := devstack.StartService("ledger", ledgerBinary(tb), env, "http://"+addr+"/healthz", devstacktest.ServiceLog(tb, "ledger"))
	require.NoError(tb, err)
	tb.Cleanup(func() { led.Stop() })
	return led, "http://" + addr
}

// startProxy runs an in-process proxy over o's Redis in front of ledgerURL.
// The returned stack has no Ledger or pool.
func startProxy(tb testing.TB, o stackOptions, ledgerURL string) *stack {
	tb.Helper()
	if o.soldOutTTL == 0 {
		o.soldOutTTL = 2 * time.Second
	}
	rdb, err := gate.NewClient(o.redisURL, gate.ClientOptions{Timeout: 250 * time.Millisecond})
	require.NoError(tb, err)
	tb.Cleanup(func() { rdb.Close() })
	if o.redisHook != nil {
		rdb.AddHook(o.redisHook)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	g := gate.New(rdb)
	if o.lookupURL == "" {
		o.lookupURL = ledgerURL
	}
	if o.lookups == 0 {
		o.lookups = 8
	}
	lc := ledger.NewClient(o.lookupURL, "test-token", 10*time.Second)
	if o.admitLog == nil {
		o.admitLog = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	reg := prometheus.NewRegistry()
	adm, err := admit.New(ctx, g, lc, admit.Config{
		SoldOutTTL: o.soldOutTTL, VoucherCacheTTL: 5 * time.Second, RedisTimeout: 250 * time.Millisecond,
		Coalesce: o.coalesce, MaxBatch: 256, CodesRefresh: o.codesRefresh, Lookups: o.lookups,
		CheckoutKeys: o.checkoutKeys, CodesClock: o.codesClock, Registerer: reg,
	}, o.admitLog)
	require.NoError(tb, err)
	tb.Cleanup(adm.Close)
	watcher, stopWatch := adm.WatchChanges(ctx, rdb, slog.New(slog.NewTextHandler(io.Discard, nil)))
	tb.Cleanup(stopWatch)
	require.NoError(tb, adm.SharePeers(ctx, rdb, nil)) // as main: the orders admitted through the other proxies
	_ = adm.LoadCodes(ctx)                             // as main: a ledger that does not answer leaves every code asked
	srv := &edge.Server{Log: o.log, Admit: adm, Ledger: lc, MaxInflight: o.maxInflight, Ready: func(context.Context) error { return nil }}
	if o.limits != nil {
		srv.Limits = limits.New(*o.limits, rdb, reg)
	}
	hs := httptest.NewServer(srv.Handler())
	tb.Cleanup(hs.Close)
	return &stack{ProxyURL: hs.URL, LedgerURL: ledgerURL, admit: adm, gate: g, rdb: rdb, checks: &agreementtest.Checks{},
		limits: srv.Limits, ledger: lc, reg: reg, watcher: watcher}
}

// newCode returns a voucher code unique to this test run.
func newCode(tb testing.TB) string {
	tb.Helper()
	return httpxtest.NewCode(tb, 16)
}

// voucherBody is the create body of a voucher live for the next hour. Its
// discount (1,000) is below the tests' order amount (5,000), so the answered
// discount is the voucher's, not capped at the order.
func voucherBody(code string, limit, perUser int, flash bool) map[string]any {
	return map[string]any{
		"code": code, "discountAmount": 1_000, "minOrderAmount": 1_000, "totalLimit": limit,
		"perUserLimit": perUser, "flashSale": flash,
		"startsAt": time.Now().Add(-time.Hour).Format(time.RFC3339), "endsAt": time.Now().Add(time.Hour).Format(time.RFC3339),
	}
}

// createVoucher creates a voucher through the ledger's admin route.
func (s *stack) createVoucher(tb testing.TB, code string, limit, perUser int, flash bool) {
	tb.Helper()
	s.create(tb, voucherBody(code, limit, perUser, flash))
}

// create sends a create body to the ledger's admin route.
func (s *stack) create(tb testing.TB, body map[string]any) {
	tb.Helper()
	r := call(tb, "POST", s.LedgerURL+"/admin/vouchers", "test-token", body)
	require.Equal(tb, 201, r.Status, r.Raw)
	if flash, _ := body["flashSale"].(bool); flash {
		s.trackFlash(body["code"].(string))
	}
}

// reserve sends a reserve of 5,000 through the proxy.
func (s *stack) reserve(tb testing.TB, code string, customer int64, order string) reply {
	return s.reserveAmount(tb, code, customer, order, 5_000)
}

func (s *stack) reserveAmount(tb testing.TB, code string, customer int64, order string, amount int64) reply {
	return call(tb, "POST", s.ProxyURL+"/vouchers/"+code+"/reservations", "",
		map[string]any{"customerId": customer, "orderId": order, "orderAmount": amount})
}

// reply is a decoded response.
type reply = httpxtest.Reply

var client = &http.Client{
	Timeout:   30 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 1024},
}

// call sends body with the proxy tests' client, as httpxtest.Call does.
func call(tb testing.TB, method, url, token string, body any) reply {
	tb.Helper()
	return httpxtest.Call(tb, client, method, url, token, body)
}

// dbState is a voucher as the database sees it.
type dbState struct {
	Used, Active, MaxPerCustomer, Remaining int
}

func (s *stack) db(tb testing.TB, code string) dbState {
	tb.Helper()
	var d dbState
	require.NoError(tb, s.pool.QueryRow(context.Background(), `
		SELECT v.used_count, v.total_limit - v.used_count,
		       (SELECT count(*) FROM voucher_redemption WHERE voucher_code = v.code AND status IN ('RESERVED','CONFIRMED')),
		       coalesce((SELECT max(n) FROM (SELECT count(*) AS n FROM voucher_redemption
		                 WHERE voucher_code = v.code AND status IN ('RESERVED','CONFIRMED') GROUP BY customer_id) x), 0)
		FROM voucher v WHERE v.code = $1`, code).Scan(&d.Used, &d.Remaining, &d.Active, &d.MaxPerCustomer))
	return d
}

// redisRemaining reads the gate's counter.
func (s *stack) redisRemaining(tb testing.TB, code string) int64 {
	tb.Helper()
	st, loaded, err := s.gate.State(context.Background(), code)
	require.NoError(tb, err)
	require.True(tb, loaded, "voucher %s not loaded in redis", code)
	return st.Remaining
}

// metric reads the value of a counter or gauge of the proxy's (its admitter's
// and limits'): the series of name whose labels hold the given name, value
// pairs.
func (s *stack) metric(tb testing.TB, name string, labels ...string) float64 {
	tb.Helper()
	fams, err := s.reg.Gather()
	require.NoError(tb, err)
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			if m.Counter != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	tb.Fatalf("no series %s %v", name, labels)
	return 0
}

// hasLabels reports whether m holds every name, value pair of labels.
func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
		}
		if !found {
			return false
		}
	}
	return true
}
