package main

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/admissions"
	"github.com/flashgate/flashgate/ledger/internal/jobs"
	"github.com/flashgate/flashgate/ledger/internal/sale"
	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/ledger/internal/web"
	"github.com/flashgate/flashgate/shared/devstack/devstacktest"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/httpx/httpxtest"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode) // as main sets release mode: no route listing on stdout
	// go-redis's own lines (the failed dials of tests that stop Redis) go
	// where main sends them, the JSON log: here, nowhere.
	redis.SetLogger(gate.NewLogger(slog.New(slog.DiscardHandler)))
	os.Exit(devstacktest.RunTests(m))
}

// testLedger is a ledger served over real HTTP on a real Postgres and Redis.
type testLedger struct {
	URL   string
	Token string
	pool  *pgxpool.Pool // the test's own, beside the ledger's
	svc   *service
	store *store.Store
	gate  *gate.Gate
	pub   gate.Publisher // the Redis client; nil without Redis
	jobs  *jobs.Jobs
	led   *sale.Ledger
	// settler and log are led's, for jobs built beside l.jobs.
	settler *sale.Settler
	log     *slog.Logger
	rdb     redis.UniversalClient // nil without Redis
	checks  *agreementChecks
}

type ledgerOptions struct {
	token   string
	ttl     time.Duration
	grace   time.Duration
	noRedis bool
	redis   string     // URL; default the shared test server
	db      string     // URL; default the shared test server
	hook    redis.Hook // added to the ledger's Redis client: a seam to inject delays at
	kafka   []string   // seed brokers of the admissions log (a kfake cluster); none: log vouchers answer 503
	export  Config     // its ExportMax and ExportTimeout; zero: 4 exports of a minute
}

func newTestLedger(tb testing.TB, o ledgerOptions) *testLedger {
	tb.Helper()
	if o.ttl == 0 {
		o.ttl = 15 * time.Minute
	}
	if o.grace == 0 {
		o.grace = 30 * time.Second
	}
	if o.db == "" {
		o.db = devstacktest.PostgresURL(tb)
	}
	if !o.noRedis && o.redis == "" {
		o.redis = devstacktest.RedisURL(tb)
	}
	// The ledger as main builds it, but for the settings a test runs with:
	// jobs that wait to be called, no per-statement deadline, no bound on a
	// standard voucher's reserves, logs discarded.
	cfg := Config{DatabaseURL: o.db, Token: o.token, ReservationTTL: o.ttl, HangingGrace: o.grace,
		ExpiryInterval: time.Hour, ReconcileInterval: time.Hour, MaxConns: 32, WriteBatch: 256, WriteTimeout: 10 * time.Second,
		ExportMax: cmp.Or(o.export.ExportMax, 4), ExportTimeout: cmp.Or(o.export.ExportTimeout, time.Minute)}
	cfg.Events.On = true
	cfg.Admissions = admissions.Config{Brokers: o.kafka, Topic: admissions.DefaultTopic, Group: admissions.DefaultGroup}
	if !o.noRedis {
		cfg.RedisURL = o.redis
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	base, cancel := context.WithCancel(context.Background())
	svc, closeAll, err := build(base, cfg, log, nil)
	require.NoError(tb, err)
	tb.Cleanup(closeAll)
	tb.Cleanup(cancel)
	if o.hook != nil {
		svc.rdb.AddHook(o.hook)
	}
	pool, err := pgxpool.New(context.Background(), o.db) // the test's own reads and writes
	require.NoError(tb, err)
	tb.Cleanup(pool.Close)

	l := &testLedger{Token: o.token, pool: pool, svc: svc, store: svc.store, gate: svc.gate, led: svc.ledger,
		settler: svc.settler, log: log, rdb: svc.rdb, jobs: svc.jobs, checks: &agreementChecks{}}
	if svc.rdb != nil {
		l.pub = svc.rdb
	}
	l.checks.addJobs(svc.jobs)
	hs := httptest.NewServer(svc.server.Handler())
	tb.Cleanup(hs.Close)
	l.URL = hs.URL
	tb.Cleanup(func() { l.requireAgreement(tb) }) // before the servers and pools close
	return l
}

// poolOfItsOwn returns a pool on l's database beside l's own, configured by
// set first (a tracer, connection hooks), closed at the test's end.
func (l *testLedger) poolOfItsOwn(tb testing.TB, set func(*pgxpool.Config)) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(l.pool.Config().ConnString())
	require.NoError(tb, err)
	set(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(tb, err)
	tb.Cleanup(pool.Close)
	return pool
}

// handler is l's HTTP handler as build wires it, with change applied to a
// copy of its Server first (a token, a metrics registry, ...).
func (l *testLedger) handler(change func(*web.Server)) http.Handler {
	srv := *l.svc.server
	if change != nil {
		change(&srv)
	}
	return srv.Handler()
}

// newJobs returns jobs wired to l as main wires them to its ledger.
func (l *testLedger) newJobs(cfg jobs.Config) *jobs.Jobs {
	j := jobs.New(l.store, l.gate, l.pub, l.settler, l.led.Warmup, l.log, cfg)
	l.checks.addJobs(j)
	return j
}

// newCode returns a voucher code unique to this test run.
func newCode(tb testing.TB) string {
	tb.Helper()
	return httpxtest.NewCode(tb, 18)
}

// voucherSpec builds a POST /admin/vouchers body valid now.
type voucherSpec struct {
	Code           string    `json:"code"`
	DiscountAmount int64     `json:"discountAmount"`
	MinOrderAmount int64     `json:"minOrderAmount"`
	TotalLimit     int       `json:"totalLimit"`
	PerUserLimit   int       `json:"perUserLimit"`
	StartsAt       time.Time `json:"startsAt"`
	EndsAt         time.Time `json:"endsAt"`
	FlashSale      bool      `json:"flashSale"`
}

func spec(code string, limit, perUser int, flash bool) voucherSpec {
	return voucherSpec{
		Code: code, DiscountAmount: 100_000, MinOrderAmount: 1_000, TotalLimit: limit, PerUserLimit: perUser,
		StartsAt: time.Now().Add(-time.Hour), EndsAt: time.Now().Add(time.Hour), FlashSale: flash,
	}
}

// createVoucher creates a voucher through the admin route.
func (l *testLedger) createVoucher(tb testing.TB, s voucherSpec) {
	tb.Helper()
	st, body := l.do(tb, http.MethodPost, "/admin/vouchers", s)
	require.Equal(tb, http.StatusCreated, st, "create voucher: %s", body)
	if s.FlashSale {
		l.checks.addFlash(s.Code)
	}
}

// reply is a decoded response.
type reply = httpxtest.Reply

var httpClient = &http.Client{
	Timeout:   30 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 512},
}

// call sends body (a string is sent as is, anything else as JSON).
func call(tb testing.TB, method, url, token string, body any) reply {
	tb.Helper()
	return httpxtest.Call(tb, httpClient, method, url, token, body)
}

func (l *testLedger) do(tb testing.TB, method, path string, body any) (int, string) {
	tb.Helper()
	r := call(tb, method, l.URL+path, l.Token, body)
	return r.Status, r.Raw
}

func (l *testLedger) call(tb testing.TB, method, path string, body any) reply {
	tb.Helper()
	return call(tb, method, l.URL+path, l.Token, body)
}

func claimBody(customer int64, order string, amount int64) map[string]any {
	return map[string]any{"customerId": customer, "orderId": order, "orderAmount": amount}
}

// counts reads a voucher's counters straight from the database.
type dbCounts struct {
	Used, Rows, Active, MaxPerCustomer int
}

func (l *testLedger) counts(tb testing.TB, code string) dbCounts {
	tb.Helper()
	var c dbCounts
	err := l.pool.QueryRow(context.Background(), `
		SELECT v.used_count,
		       (SELECT count(*) FROM voucher_redemption WHERE voucher_code = v.code),
		       (SELECT count(*) FROM voucher_redemption WHERE voucher_code = v.code AND status IN ('RESERVED','CONFIRMED')),
		       coalesce((SELECT max(n) FROM (SELECT count(*) AS n FROM voucher_redemption
		                 WHERE voucher_code = v.code AND status IN ('RESERVED','CONFIRMED') GROUP BY customer_id) x), 0)
		FROM voucher v WHERE v.code = $1`, code).Scan(&c.Used, &c.Rows, &c.Active, &c.MaxPerCustomer)
	require.NoError(tb, err)
	return c
}
