// Package ledgertest starts a whole ledger for the tests of the ledger's
// packages: New wires one as app.Build does, on the devstack's PostgreSQL and
// Redis (or servers of the test's own), and serves it over HTTP; the helpers
// around it drive it as clients do and check what it leaves: the books in the
// database (CheckBooks), Redis against them (CheckRedisMatches, and at every
// test's end the agreement check), the events it delivered, a ledger process
// (StartLedger) and the admissions log (NewKafka). A test package's TestMain
// calls RunTests.
package ledgertest

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/admissions"
	"github.com/flashgate/flashgate/ledger/internal/app"
	"github.com/flashgate/flashgate/ledger/internal/jobs"
	"github.com/flashgate/flashgate/ledger/internal/sale"
	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/ledger/internal/web"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
)

// Ledger is a ledger served over real HTTP on a real Postgres and Redis.
type Ledger struct {
	URL    string
	Token  string
	Pool   *pgxpool.Pool // the test's own, beside the ledger's
	Svc    *app.Service
	Store  *store.Store
	Gate   *gate.Gate
	Pub    gate.Publisher // the Redis client; nil without Redis
	Jobs   *jobs.Jobs
	Ledger *sale.Ledger
	// Settler and Log are Ledger's, for jobs built beside Jobs.
	Settler *sale.Settler
	Log     *slog.Logger
	RDB     redis.UniversalClient // nil without Redis
	Checks  *AgreementChecks
}

type Options struct {
	Token   string
	TTL     time.Duration
	Grace   time.Duration
	NoRedis bool
	Redis   string     // URL; default the shared test server
	DB      string     // URL; default the shared test server
	Hook    redis.Hook // added to the ledger's Redis client: a seam to inject delays at
	Kafka   []string   // seed brokers of the admissions log (a kfake cluster); none: log vouchers answer 503
	Export  app.Config // its ExportMax and ExportTimeout; zero: 4 exports of a minute
}

func New(tb testing.TB, o Options) *Ledger {
	tb.Helper()
	if o.TTL == 0 {
		o.TTL = 15 * time.Minute
	}
	if o.Grace == 0 {
		o.Grace = 30 * time.Second
	}
	if o.DB == "" {
		o.DB = devstacktest.PostgresURL(tb)
	}
	if !o.NoRedis && o.Redis == "" {
		o.Redis = devstacktest.RedisURL(tb)
	}
	// The ledger as app.Build wires it, but for the settings a test runs with:
	// jobs that wait to be called, no per-statement deadline, no bound on a
	// standard voucher's reserves, logs discarded.
	cfg := app.Config{DatabaseURL: o.DB, Token: o.Token, ReservationTTL: o.TTL, HangingGrace: o.Grace,
		ExpiryInterval: time.Hour, ReconcileInterval: time.Hour, MaxConns: 32, WriteBatch: 256, WriteTimeout: 10 * time.Second,
		ExportMax: cmp.Or(o.Export.ExportMax, 4), ExportTimeout: cmp.Or(o.Export.ExportTimeout, time.Minute)}
	cfg.Events.On = true
	cfg.Admissions = admissions.Config{Brokers: o.Kafka, Topic: admissions.DefaultTopic, Group: admissions.DefaultGroup}
	if !o.NoRedis {
		cfg.RedisURL = o.Redis
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	base, cancel := context.WithCancel(context.Background())
	svc, closeAll, err := app.Build(base, cfg, log, nil)
	require.NoError(tb, err)
	tb.Cleanup(closeAll)
	tb.Cleanup(cancel)
	if o.Hook != nil {
		svc.RDB.AddHook(o.Hook)
	}
	pool, err := pgxpool.New(context.Background(), o.DB) // the test's own reads and writes
	require.NoError(tb, err)
	tb.Cleanup(pool.Close)

	l := &Ledger{Token: o.Token, Pool: pool, Svc: svc, Store: svc.Store, Gate: svc.Gate, Ledger: svc.Ledger,
		Settler: svc.Settler, Log: log, RDB: svc.RDB, Jobs: svc.Jobs, Checks: &AgreementChecks{}}
	if svc.RDB != nil {
		l.Pub = svc.RDB
	}
	l.Checks.AddJobs(svc.Jobs)
	hs := httptest.NewServer(svc.Server.Handler())
	tb.Cleanup(hs.Close)
	l.URL = hs.URL
	tb.Cleanup(func() { l.requireAgreement(tb) }) // before the servers and pools close
	return l
}

// PoolOfItsOwn returns a pool on l's database beside l's own, configured by
// set first (a tracer, connection hooks), closed at the test's end.
func (l *Ledger) PoolOfItsOwn(tb testing.TB, set func(*pgxpool.Config)) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(l.Pool.Config().ConnString())
	require.NoError(tb, err)
	set(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(tb, err)
	tb.Cleanup(pool.Close)
	return pool
}

// Handler is l's HTTP handler as app.Build wires it, with change applied to a
// copy of its Server first (a token, a metrics registry, ...).
func (l *Ledger) Handler(change func(*web.Server)) http.Handler {
	srv := *l.Svc.Server
	if change != nil {
		change(&srv)
	}
	return srv.Handler()
}

// NewJobs returns jobs wired to l as app.Build wires them to its ledger.
func (l *Ledger) NewJobs(cfg jobs.Config) *jobs.Jobs {
	j := jobs.New(l.Store, l.Gate, l.Pub, l.Settler, l.Ledger.Warmup, l.Log, cfg)
	l.Checks.AddJobs(j)
	return j
}

// NewCode returns a voucher code unique to this test run.
func NewCode(tb testing.TB) string {
	tb.Helper()
	return httpxtest.NewCode(tb, 18)
}

// VoucherSpec builds a POST /admin/vouchers body valid now.
type VoucherSpec struct {
	Code           string    `json:"code"`
	DiscountAmount int64     `json:"discountAmount"`
	MinOrderAmount int64     `json:"minOrderAmount"`
	TotalLimit     int       `json:"totalLimit"`
	PerUserLimit   int       `json:"perUserLimit"`
	StartsAt       time.Time `json:"startsAt"`
	EndsAt         time.Time `json:"endsAt"`
	FlashSale      bool      `json:"flashSale"`
}

func Spec(code string, limit, perUser int, flash bool) VoucherSpec {
	return VoucherSpec{
		Code: code, DiscountAmount: 100_000, MinOrderAmount: 1_000, TotalLimit: limit, PerUserLimit: perUser,
		StartsAt: time.Now().Add(-time.Hour), EndsAt: time.Now().Add(time.Hour), FlashSale: flash,
	}
}

// CreateVoucher creates a voucher through the admin route.
func (l *Ledger) CreateVoucher(tb testing.TB, s VoucherSpec) {
	tb.Helper()
	st, body := l.Do(tb, http.MethodPost, "/admin/vouchers", s)
	require.Equal(tb, http.StatusCreated, st, "create voucher: %s", body)
	if s.FlashSale {
		l.Checks.AddFlash(s.Code)
	}
}

// Reply is a decoded response.
type Reply = httpxtest.Reply

var HTTPClient = &http.Client{
	Timeout:   30 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 512},
}

// Call sends body (a string is sent as is, anything else as JSON).
func Call(tb testing.TB, method, url, token string, body any) Reply {
	tb.Helper()
	return httpxtest.Call(tb, HTTPClient, method, url, token, body)
}

func (l *Ledger) Do(tb testing.TB, method, path string, body any) (int, string) {
	tb.Helper()
	r := Call(tb, method, l.URL+path, l.Token, body)
	return r.Status, r.Raw
}

func (l *Ledger) Call(tb testing.TB, method, path string, body any) Reply {
	tb.Helper()
	return Call(tb, method, l.URL+path, l.Token, body)
}

func ClaimBody(customer int64, order string, amount int64) map[string]any {
	return map[string]any{"customerId": customer, "orderId": order, "orderAmount": amount}
}

// DBCounts are a voucher's counters as Counts reads them, straight from the
// database.
type DBCounts struct {
	Used, Rows, Active, MaxPerCustomer int
}

func (l *Ledger) Counts(tb testing.TB, code string) DBCounts {
	tb.Helper()
	var c DBCounts
	err := l.Pool.QueryRow(context.Background(), `
		SELECT v.used_count,
		       (SELECT count(*) FROM voucher_redemption WHERE voucher_code = v.code),
		       (SELECT count(*) FROM voucher_redemption WHERE voucher_code = v.code AND status IN ('RESERVED','CONFIRMED')),
		       coalesce((SELECT max(n) FROM (SELECT count(*) AS n FROM voucher_redemption
		                 WHERE voucher_code = v.code AND status IN ('RESERVED','CONFIRMED') GROUP BY customer_id) x), 0)
		FROM voucher v WHERE v.code = $1`, code).Scan(&c.Used, &c.Rows, &c.Active, &c.MaxPerCustomer)
	require.NoError(tb, err)
	return c
}

// RunTests is a test package's TestMain body: gin in test mode (as main sets
// release mode: no route listing on stdout), go-redis's own lines (the failed
// dials of tests that stop Redis) discarded, and the shared test servers of
// devstacktest started and stopped around m.
func RunTests(m *testing.M) int {
	gin.SetMode(gin.TestMode)
	redis.SetLogger(gate.NewLogger(slog.New(slog.DiscardHandler)))
	return devstacktest.RunTests(m)
}
