// Command ledger owns flashgate's Postgres: it writes admitted reservations,
// confirms and releases them, expires abandoned ones, keeps Redis in step with
// the database and reloads Redis after it lost its data.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/ledger/internal/admissions"
	"github.com/flashgate/flashgate/ledger/internal/jobs"
	"github.com/flashgate/flashgate/ledger/internal/outbox"
	"github.com/flashgate/flashgate/ledger/internal/sale"
	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/ledger/internal/web"
	"github.com/flashgate/flashgate/migrations"
	"github.com/flashgate/flashgate/shared/envconf"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/httpx"
)

// Config is everything the ledger reads from its environment, read once in main.
type Config struct {
	Addr              string                        // LEDGER_ADDR
	DatabaseURL       string                        // DATABASE_URL
	RedisURL          string                        // REDIS_URL; empty: no flash vouchers
	Token             string                        // LEDGER_TOKEN, named "default", every scope
	Tokens            map[string]envconf.Credential // LEDGER_TOKENS: "name:token[:scope+scope...],..." (audit actors)
	OpenAdmin         bool                          // LEDGER_AUTH=off: no token required (and none set)
	ReservationTTL    time.Duration                 // RESERVATION_TTL
	ExpiryInterval    time.Duration                 // EXPIRY_INTERVAL
	ReconcileInterval time.Duration                 // RECONCILE_INTERVAL
	HangingGrace      time.Duration                 // HANGING_GRACE
	MaxConns          int                           // DB_MAX_CONNS
	MinConns          int                           // DB_MIN_CONNS: opened at start and kept open
	RedisWarm         int                           // REDIS_WARM_CONNS: Redis connections opened at start
	WriteBatch        int                           // WRITE_MAX_BATCH: most admitted writes per transaction
	MaxPerVoucher     int                           // MAX_INFLIGHT_PER_VOUCHER: standard-path reserves of one voucher at once
	VoucherWait       time.Duration                 // VOUCHER_WAIT: longest wait for one of those slots
	DBTimeout         time.Duration                 // DB_TIMEOUT: deadline of each statement and connection wait
	WriteTimeout      time.Duration                 // WRITE_TIMEOUT, capped by writeTimeoutFor
	ExportMax         int                           // EXPORT_MAX: CSV exports streaming at once, on a pool of as many connections
	ExportTimeout     time.Duration                 // EXPORT_TIMEOUT: the deadline of one export, its transaction's on both sides
	httpx.Serving                                   // MAX_CONNS, MAX_INFLIGHT, DEBUG_ADDR, SHUTDOWN_DELAY, SHUTDOWN_TIMEOUT
	Events            outbox.Config                 // EVENTS, WEBHOOK_*, KAFKA_*, EVENT_RETENTION
	Admissions        admissions.Config             // KAFKA_ADMISSIONS_*: the log of writePath log vouchers
}

// writeMargin is what writeTimeoutFor keeps between the longest time a write
// can still commit and HANGING_GRACE.
const writeMargin = 100 * time.Millisecond

// writeTimeoutFor bounds one group commit (and so an admitted write in flight
// when the ledger stops accepting): WRITE_TIMEOUT, but never so long that the
// write could still commit once HANGING_GRACE has passed. A write's last
// statement may run on the server up to DB_TIMEOUT past the writer's own
// deadline (its session's statement_timeout), and the reconciler frees a
// Redis hold with no row once it is older than the grace: a grace shorter
// than the write's life would free a use whose row then commits.
func writeTimeoutFor(set, grace, dbTimeout time.Duration) time.Duration {
	return max(min(set, grace-dbTimeout-writeMargin), writeMargin)
}

// minHangingGrace is HANGING_GRACE's floor: an admission younger than the
// grace may still be on its way to the database, and a grace shorter than a
// second would let the reconciler free holds whose writes are still in flight.
// Tests run the jobs fast with a grace of 1 to 2 s.
const minHangingGrace = time.Second

// doc heads the ledger's --help.
const doc = `ledger owns flashgate's Postgres: it writes admitted reservations, confirms and
releases them, expires abandoned ones and keeps Redis in step with the database.`

// configFrom reads the Config from e (the environment, or a map in tests);
// each read's last argument is the setting's line in --help.
func configFrom(e *envconf.Reader) (Config, error) {
	c := Config{
		Addr:        e.Addr("LEDGER_ADDR", "127.0.0.1:8081", "listen address"),
		DatabaseURL: e.String("DATABASE_URL", "", "required: Postgres; the ledger applies its migrations at start"),
		RedisURL: e.String("REDIS_URL", "",
			"Redis for flash vouchers, in the proxy's form; unset: flash vouchers answer 503"),
		Token: e.String("LEDGER_TOKEN", "",
			"bearer token (actor default) with every scope; LEDGER_TOKEN or LEDGER_TOKENS is required unless LEDGER_AUTH=off"),
		Tokens: e.Tokens("LEDGER_TOKENS", httpx.Scopes,
			"more bearer tokens with the actor names the audit trail records and, optionally, their scopes: name:token[:scope+scope...],...; a token without a scope list has every scope; a proxy's needs only internal"),
		OpenAdmin: !e.Switch("LEDGER_AUTH", true,
			"off: every route is open without a token (logged at WARN at start); on: LEDGER_TOKEN or LEDGER_TOKENS is required, the ledger refuses to start without one"),
		ReservationTTL: e.Duration("RESERVATION_TTL", 15*time.Minute,
			"how long a reservation holds its use before the sweeper releases it"),
		ExpiryInterval:    e.Duration("EXPIRY_INTERVAL", time.Minute, "how often the expiry sweeper runs"),
		ReconcileInterval: e.Duration("RECONCILE_INTERVAL", time.Minute, "how often live flash vouchers are reconciled"),
		HangingGrace: e.DurationMin("HANGING_GRACE", 30*time.Second, minHangingGrace,
			"a Redis admission with no database row is freed only after this long"),
		MaxConns: e.Int("DB_MAX_CONNS", 32, 2, "Postgres pool size"),
		MinConns: e.Int("DB_MIN_CONNS", 4, 0,
			"Postgres connections opened at start, primed with the hot statements and kept open, so that the first requests of a sale find them (at most DB_MAX_CONNS)"),
		RedisWarm:  e.Int("REDIS_WARM_CONNS", 4, 0, "Redis connections opened as the service starts, with every gate script loaded"),
		WriteBatch: e.Int("WRITE_MAX_BATCH", 256, 1, "most admitted reservations written in one transaction"),
		MaxPerVoucher: e.Int("MAX_INFLIGHT_PER_VOUCHER", 16, 1,
			"most reserves of one standard voucher worked on at once"),
		VoucherWait: e.Duration("VOUCHER_WAIT", 500*time.Millisecond,
			"longest wait for a standard voucher's slot (below 1s)"),
		DBTimeout: e.Duration("DB_TIMEOUT", 500*time.Millisecond,
			"deadline of each Postgres statement and pool wait (below 2s), on the ledger's side and on the server's (statement_timeout)"),
		WriteTimeout: e.Duration("WRITE_TIMEOUT", 10*time.Second,
			"deadline of one group commit of admitted writes; capped at HANGING_GRACE minus DB_TIMEOUT and 100ms, so that no hold is freed while its write could still commit"),
		ExportMax: e.Int("EXPORT_MAX", 2, 1,
			"most CSV exports streaming at once, each on a connection of their own pool (beside DB_MAX_CONNS); one more is 429 RATE_LIMITED with Retry-After"),
		ExportTimeout: e.Duration("EXPORT_TIMEOUT", time.Minute,
			"deadline of one CSV export, however slowly its client reads: its transaction, and the snapshot that holds back vacuum, ends by then (statement_timeout and idle_in_transaction_session_timeout on its sessions too); the client then sees a broken transfer"),
		Serving: httpx.ReadServing(e),
	}
	if err := e.Err(); err != nil {
		return c, err
	}
	var err error
	if c.Events, err = outbox.ReadConfig(e); err != nil {
		return c, err
	}
	if c.Admissions, err = admissions.ReadConfig(e, c.Events.Brokers); err != nil {
		return c, err
	}
	if c.DatabaseURL == "" {
		return c, errors.New("DATABASE_URL is required")
	}
	if err := store.CheckURL(c.DatabaseURL); err != nil {
		return c, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if c.RedisURL != "" {
		if err := gate.CheckURL(c.RedisURL); err != nil {
			return c, err
		}
	}
	if c.MinConns > c.MaxConns {
		return c, fmt.Errorf("DB_MIN_CONNS (%d) must be at most DB_MAX_CONNS (%d)", c.MinConns, c.MaxConns)
	}
	if err := sale.CheckVoucherWait(c.VoucherWait); err != nil {
		return c, err
	}
	if err := store.CheckDBTimeout(c.DBTimeout); err != nil {
		return c, err
	}
	if c.HangingGrace <= c.DBTimeout+2*writeMargin {
		return c, fmt.Errorf("HANGING_GRACE (%v) must be above DB_TIMEOUT (%v) plus 200ms: a hold would be freed while its write could still commit",
			c.HangingGrace, c.DBTimeout)
	}
	if err := httpx.CheckLoopback("DEBUG_ADDR", c.DebugAddr); err != nil {
		return c, err
	}
	c.WriteTimeout = writeTimeoutFor(c.WriteTimeout, c.HangingGrace, c.DBTimeout)
	if err := c.Shutdown.Check(c.WriteTimeout, "the group commit's deadline (WRITE_TIMEOUT)"); err != nil {
		return c, err
	}
	return c, checkLedgerAuth(c)
}

// checkLedgerAuth refuses a ledger without a token unless LEDGER_AUTH=off
// says so, LEDGER_AUTH=off beside a token (which of the two was meant?), and
// LEDGER_TOKENS that make an actor ambiguous: the ledger fails closed, as the
// proxy does.
func checkLedgerAuth(c Config) error {
	hasToken := c.Token != "" || len(c.Tokens) > 0
	switch {
	case !hasToken && !c.OpenAdmin:
		return errors.New("LEDGER_TOKEN or LEDGER_TOKENS is required: without a token anyone who reaches the ledger can create, change, list or export vouchers and write admitted reservations; LEDGER_AUTH=off opens the ledger on purpose")
	case hasToken && c.OpenAdmin:
		return errors.New("LEDGER_AUTH=off and LEDGER_TOKEN or LEDGER_TOKENS are both set: unset one")
	}
	return httpx.CheckTokens("LEDGER_TOKEN", c.Token, "LEDGER_TOKENS", c.Tokens)
}

func main() {
	gin.SetMode(gin.ReleaseMode)
	envconf.Main("ledger", doc, configFrom, run)
}

// service is the ledger wired from its Config: what run serves, and what the
// tests drive.
type service struct {
	cfg      Config
	log      *slog.Logger
	store    *store.Store
	rdb      redis.UniversalClient // nil without REDIS_URL
	gate     *gate.Gate            // nil without REDIS_URL
	settler  *sale.Settler
	ledger   *sale.Ledger
	jobs     *jobs.Jobs
	operator *sale.Operator
	server   *web.Server
	metrics  *httpx.Metrics
	outbox   *outbox.Metrics
	admitted *admissions.Metrics
	consumer *admissions.Consumer // nil without an admissions log
	lag      *admissions.GroupLag // the consumer group's lag; nil without an admissions log
}

// build migrates the database and wires the ledger from cfg; it starts
// nothing. Writes run under base, which must outlive the requests that wait
// on them; alive, when not nil, is asked by readiness first (nil while the
// service accepts requests). closeAll frees the connections.
func build(base context.Context, cfg Config, log *slog.Logger, alive func() error) (svc *service, closeAll func(), err error) {
	if err := migrations.MigrateURL(base, cfg.DatabaseURL); err != nil {
		return nil, nil, err
	}
	svc = &service{cfg: cfg, log: log, metrics: httpx.NewMetrics("ledger")}
	if svc.store, err = store.Open(base, store.PoolConfig{URL: cfg.DatabaseURL, MaxConns: cfg.MaxConns, MinConns: cfg.MinConns,
		Timeout: cfg.DBTimeout}, cfg.ReservationTTL); err != nil {
		return nil, nil, err
	}
	closeAll = svc.store.Close
	if err := svc.store.OpenExports(base, store.PoolConfig{URL: cfg.DatabaseURL, MaxConns: cfg.ExportMax,
		Timeout: cfg.ExportTimeout}); err != nil {
		closeAll()
		return nil, nil, err
	}
	var g *gate.Gate
	if cfg.RedisURL != "" {
		if svc.rdb, err = gate.NewClient(cfg.RedisURL, gate.ClientOptions{Timeout: time.Second}); err != nil {
			closeAll()
			return nil, nil, err
		}
		closeAll = func() { svc.rdb.Close(); svc.store.Close() }
		g = gate.New(svc.rdb)
	}
	svc.gate = g
	var pub gate.Publisher // a nil interface without Redis, not a nil client
	if svc.rdb != nil {
		pub = svc.rdb
	}
	svc.store.WriteEvents(cfg.Events.On)
	reg := svc.metrics.Registry
	writer := sale.NewWriter(base, svc.store, cfg.WriteBatch, cfg.WriteTimeout)
	writer.Measure(sale.NewMetrics(reg))
	svc.settler = sale.NewSettler(svc.store, g, time.Now, log)
	svc.settler.WaitAfterFault(2 * cfg.DBTimeout) // the server cancels a statement within DB_TIMEOUT (store.Open)
	svc.ledger = sale.NewLedger(svc.store, writer, g, pub, svc.settler, log)
	if cfg.MaxPerVoucher > 0 {
		svc.ledger.LimitStandard(sale.NewLimiter(cfg.MaxPerVoucher, cfg.VoucherWait))
	}
	svc.admitted = admissions.NewMetrics(reg)
	if cfg.Admissions.On() {
		producer, err := admissions.NewProducer(cfg.Admissions.Brokers, cfg.Admissions.Topic, time.Now)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		svc.ledger.UseLog(producer)
		closeStores := closeAll
		closeAll = func() { producer.Close(); closeStores() }
		if err := svc.consumeLog(producer); err != nil {
			closeAll()
			return nil, nil, err
		}
		closeProducer := closeAll
		closeAll = func() { svc.lag.Close(); closeProducer() }
	}
	var logLag func() (time.Duration, bool)
	if svc.lag != nil {
		logLag = svc.lag.Lag
		svc.settler.UseLogLag(logLag)
	}
	svc.jobs = jobs.New(svc.store, g, pub, svc.settler, svc.ledger.Warmup, log, jobs.Config{
		ExpiryInterval: cfg.ExpiryInterval, ReconcileInterval: cfg.ReconcileInterval, HangingGrace: cfg.HangingGrace,
		Metrics: jobs.NewMetrics(reg), LogLag: logLag, RetakeStale: svc.ledger.RetakeStale,
	})
	svc.operator = sale.NewOperator(svc.store, g, pub, svc.ledger.Warmup, log)
	svc.outbox = outbox.NewMetrics(reg)
	svc.server = &web.Server{Log: log, Ledger: svc.ledger, Operator: svc.operator, Store: svc.store, Jobs: svc.jobs,
		Token: cfg.Token, Tokens: cfg.Tokens, ExportMax: cfg.ExportMax, ExportTimeout: cfg.ExportTimeout, Metrics: svc.metrics, MetricsElsewhere: cfg.MetricsAddr != "", MaxInflight: cfg.MaxInflight, InflightCap: cfg.InflightCap(), LatencySLO: cfg.LatencySLO, HangingGrace: cfg.HangingGrace,
		Ready: svc.readiness(alive)}
	return svc, closeAll, nil
}

// readyEvery is how long a judgement of the pool's health answers /readyz:
// a flood of probes reaches Postgres at most once per it.
const readyEvery = 500 * time.Millisecond

// readiness is the ledger's /readyz: not while alive says so (stopping),
// else while its pool can serve (store.Health, judged at most once every
// readyEvery). Without Redis, standard vouchers, confirm and release still
// work (flash reserves get a fast 503): Redis is not asked.
func (svc *service) readiness(alive func() error) func(*gin.Context) error {
	health := svc.store.Health(readyEvery)
	svc.metrics.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "flashgate_ready_pings_total",
		Help: "Pings /readyz sent to Postgres: at most one per 500ms whatever the probes' rate, none while the pool is busy with work.",
	}, func() float64 { return float64(health.Pings()) }))
	return func(c *gin.Context) error {
		if alive != nil {
			if err := alive(); err != nil {
				return err
			}
		}
		return health.Check(c)
	}
}

func run(cfg Config, log *slog.Logger) error {
	stopping, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	life := httpx.NewLifecycle(stopping, cfg.Shutdown, log)
	defer life.End()
	ctx := life.Context() // what requests wait on outlives the drain
	redis.SetLogger(gate.NewLogger(log))

	// The address first: a taken port stops the start before anything is
	// contacted or said to listen.
	lns, err := httpx.ListenAll("LEDGER_ADDR", cfg.Addr, cfg.MetricsAddr, cfg.DebugAddr, log)
	if err != nil {
		return err
	}
	ln, metricsLn := lns.Main, lns.Metrics
	defer ln.Close()
	svc, closeAll, err := build(ctx, cfg, log, life.Err)
	if err != nil {
		return databaseErr(err)
	}
	defer closeAll()
	// Beside serving: a slow dependency never delays the start.
	go svc.store.Warm(stopping, cfg.MinConns, log)
	if svc.rdb != nil {
		go warmRedis(stopping, svc.rdb, cfg.RedisWarm, log)
		// Another ledger's admin change reaches this one's terms cache at once.
		go gate.WatchChanges(ctx, svc.rdb, svc.store.ForgetTerms, log)
	} else {
		log.Warn("REDIS_URL is not set: flash-sale vouchers will answer 503")
	}
	if cfg.OpenAdmin {
		log.Warn("LEDGER_AUTH=off: every route is open without a token; anyone who reaches the ledger can change, list or export vouchers and write admitted reservations")
	}
	svc.metrics.ServeMetricsOn(metricsLn, log)
	jobsDone, err := svc.startBackground(ctx, stopping.Done())
	if err != nil {
		return err
	}
	log.Info("ledger listening", "addr", cfg.Addr, "reservation_ttl", cfg.ReservationTTL.String())
	err = life.Serve(ln, httpx.NewServer(cfg.Addr, svc.server.Handler()), cfg.MaxClientConns)
	stop() // when serving failed, the jobs stop too
	<-jobsDone
	// The drained requests may have parked writes that failed on a fault:
	// settle them now, or their Redis uses would wait for a reconcile.
	if n := svc.settler.Drain(ctx); n > 0 {
		log.Info("settled writes that failed on a fault before stopping", "orders", n)
	}
	log.Info("ledger stopped")
	return err
}

// databaseErr names DATABASE_URL in a start that could not connect to
// Postgres (refused, unknown host, password or database refused): a setting
// to fix, exit 2. Other errors (a migration that failed) are returned as they are.
func databaseErr(err error) error {
	if store.IsConnectError(err) {
		return fmt.Errorf("DATABASE_URL: %w: %w", err, envconf.ErrBadSetting)
	}
	return err
}

// startBackground runs the jobs and the event dispatcher until stop closes:
// a job run in progress then finishes (under ctx); the dispatcher starts no
// new batch and frees its lock. The channel closes once both have returned.
func (svc *service) startBackground(ctx context.Context, stop <-chan struct{}) (<-chan struct{}, error) {
	cfg := svc.cfg
	sinks, closeSinks, err := cfg.Events.Sinks(svc.outbox)
	if err != nil {
		return nil, err
	}
	consumer := svc.consumer
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		if consumer == nil {
			return
		}
		// Stopping abandons a batch in progress uncommitted: the member
		// that takes its partition writes it again, idempotently.
		cctx, cancel := context.WithCancel(ctx)
		go func() { <-stop; cancel() }()
		go svc.lag.Run(cctx, admissions.LagInterval)
		if err := consumer.Run(cctx); err != nil {
			svc.log.Error("admissions consumer did not start: log vouchers' admissions are not written", "err", err)
		}
	}()
	go func() {
		defer wg.Done()
		svc.jobs.Run(ctx, stop)
	}()
	go func() {
		defer wg.Done()
		defer closeSinks()
		if !cfg.Events.On {
			svc.log.Warn("EVENTS=off: no events are written or delivered (for measuring their cost only)")
			return
		}
		outbox.NewDispatcher(svc.store, sinks, svc.log, outbox.DispatcherConfig{
			DatabaseURL: cfg.DatabaseURL, Retention: cfg.Events.Retention, Metrics: svc.outbox,
		}).Run(ctx, stop)
	}()
	go func() { wg.Wait(); close(done) }()
	return done, nil
}

// warmRedis opens n Redis connections and loads the gate's scripts as the
// ledger starts serving (gate.Warm). A failure is logged, not fatal.
func warmRedis(ctx context.Context, rdb redis.UniversalClient, n int, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, store.WarmTimeout)
	defer cancel()
	start := time.Now()
	if err := gate.Warm(ctx, rdb, n); err != nil {
		log.Warn("redis warm-up failed (REDIS_URL): its connections open on demand", "conns", n, "err", err)
		return
	}
	log.Info("redis connections warm", "conns", n, "took", time.Since(start).String())
}

// consumeLog wires the admissions log's consumer and the measure of its
// group's lag, which covers producer's appends in flight.
func (svc *service) consumeLog(producer *admissions.Producer) (err error) {
	if svc.consumer, err = svc.newConsumer(); err != nil {
		return err
	}
	a := svc.cfg.Admissions
	if svc.lag, err = admissions.NewGroupLag(a.Brokers, a.Topic, a.Group, time.Now, svc.admitted, svc.log); err != nil {
		return err
	}
	svc.lag.Covering(producer.InFlight)
	return nil
}

// newConsumer returns a member of the admissions consumer group writing
// through the service's ledger.
func (svc *service) newConsumer() (*admissions.Consumer, error) {
	cfg := svc.cfg
	return admissions.NewConsumer(admissions.ConsumerConfig{
		Brokers: cfg.Admissions.Brokers, Topic: cfg.Admissions.Topic, Group: cfg.Admissions.Group,
		SessionTimeout: cfg.Admissions.SessionTimeout, MaxPoll: cfg.WriteBatch, Backoff: 2 * cfg.DBTimeout, Metrics: svc.admitted,
	}, svc.ledger, svc.store, svc.log)
}
