// Package app wires the ledger from its Config: Build, which both Run and the
// tests (ledgertest) use, and Run, which serves it until a signal stops it.
package app

import (
	"context"
	"log/slog"
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

// Service is the ledger wired from its Config: what Run serves, and what the
// tests drive.
type Service struct {
	Cfg      Config
	Log      *slog.Logger
	Store    *store.Store
	RDB      redis.UniversalClient // nil without REDIS_URL
	Gate     *gate.Gate            // nil without REDIS_URL
	Settler  *sale.Settler
	Ledger   *sale.Ledger
	Jobs     *jobs.Jobs
	Operator *sale.Operator
	Server   *web.Server
	Metrics  *httpx.Metrics
	Outbox   *outbox.Metrics
	Admitted *admissions.Metrics
	Consumer *admissions.Consumer // nil without an admissions log
	Lag      *admissions.GroupLag // the consumer group's lag; nil without an admissions log
}

// Build migrates the database and wires the ledger from cfg; it starts
// nothing. Writes run under base, which must outlive the requests that wait
// on them; alive, when not nil, is asked by readiness first (nil while the
// service accepts requests). closeAll frees the connections.
func Build(base context.Context, cfg Config, log *slog.Logger, alive func() error) (svc *Service, closeAll func(), err error) {
	if err := migrations.MigrateURL(base, cfg.DatabaseURL); err != nil {
		return nil, nil, err
	}
	svc = &Service{Cfg: cfg, Log: log, Metrics: httpx.NewMetrics("ledger")}
	if svc.Store, err = store.Open(base, store.PoolConfig{URL: cfg.DatabaseURL, MaxConns: cfg.MaxConns, MinConns: cfg.MinConns,
		Timeout: cfg.DBTimeout}, cfg.ReservationTTL); err != nil {
		return nil, nil, err
	}
	closeAll = svc.Store.Close
	if err := svc.Store.OpenExports(base, store.PoolConfig{URL: cfg.DatabaseURL, MaxConns: cfg.ExportMax,
		Timeout: cfg.ExportTimeout}); err != nil {
		closeAll()
		return nil, nil, err
	}
	var g *gate.Gate
	if cfg.RedisURL != "" {
		if svc.RDB, err = gate.NewClient(cfg.RedisURL, gate.ClientOptions{Timeout: time.Second}); err != nil {
			closeAll()
			return nil, nil, err
		}
		closeAll = func() { svc.RDB.Close(); svc.Store.Close() }
		g = gate.New(svc.RDB)
	}
	svc.Gate = g
	var pub gate.Publisher // a nil interface without Redis, not a nil client
	if svc.RDB != nil {
		pub = svc.RDB
	}
	svc.Store.WriteEvents(cfg.Events.On)
	reg := svc.Metrics.Registry
	writer := sale.NewWriter(base, svc.Store, cfg.WriteBatch, cfg.WriteTimeout)
	writer.Measure(sale.NewMetrics(reg))
	svc.Settler = sale.NewSettler(svc.Store, g, time.Now, log)
	svc.Settler.WaitAfterFault(2 * cfg.DBTimeout) // the server cancels a statement within DB_TIMEOUT (store.Open)
	svc.Ledger = sale.NewLedger(svc.Store, writer, g, pub, svc.Settler, log)
	if cfg.MaxPerVoucher > 0 {
		svc.Ledger.LimitStandard(sale.NewLimiter(cfg.MaxPerVoucher, cfg.VoucherWait))
	}
	svc.Admitted = admissions.NewMetrics(reg)
	if cfg.Admissions.On() {
		producer, err := admissions.NewProducer(cfg.Admissions.Brokers, cfg.Admissions.Topic, time.Now)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		svc.Ledger.UseLog(producer)
		closeStores := closeAll
		closeAll = func() { producer.Close(); closeStores() }
		if err := svc.consumeLog(producer); err != nil {
			closeAll()
			return nil, nil, err
		}
		closeProducer := closeAll
		closeAll = func() { svc.Lag.Close(); closeProducer() }
	}
	var logLag func() (time.Duration, bool)
	if svc.Lag != nil {
		logLag = svc.Lag.Lag
		svc.Settler.UseLogLag(logLag)
	}
	svc.Jobs = jobs.New(svc.Store, g, pub, svc.Settler, svc.Ledger.Warmup, log, jobs.Config{
		ExpiryInterval: cfg.ExpiryInterval, ReconcileInterval: cfg.ReconcileInterval, HangingGrace: cfg.HangingGrace,
		Metrics: jobs.NewMetrics(reg), LogLag: logLag, RetakeStale: svc.Ledger.RetakeStale,
	})
	svc.Operator = sale.NewOperator(svc.Store, g, pub, svc.Ledger.Warmup, log)
	svc.Outbox = outbox.NewMetrics(reg)
	svc.Server = &web.Server{Log: log, Ledger: svc.Ledger, Operator: svc.Operator, Store: svc.Store, Jobs: svc.Jobs,
		Token: cfg.Token, Tokens: cfg.Tokens, ExportMax: cfg.ExportMax, ExportTimeout: cfg.ExportTimeout, Metrics: svc.Metrics, MetricsElsewhere: cfg.MetricsAddr != "", MaxInflight: cfg.MaxInflight, InflightCap: cfg.InflightCap(), LatencySLO: cfg.LatencySLO, HangingGrace: cfg.HangingGrace,
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
func (svc *Service) readiness(alive func() error) func(*gin.Context) error {
	health := svc.Store.Health(readyEvery)
	svc.Metrics.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
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

// consumeLog wires the admissions log's consumer and the measure of its
// group's lag, which covers producer's appends in flight.
func (svc *Service) consumeLog(producer *admissions.Producer) (err error) {
	if svc.Consumer, err = svc.NewConsumer(); err != nil {
		return err
	}
	a := svc.Cfg.Admissions
	if svc.Lag, err = admissions.NewGroupLag(a.Brokers, a.Topic, a.Group, time.Now, svc.Admitted, svc.Log); err != nil {
		return err
	}
	svc.Lag.Covering(producer.InFlight)
	return nil
}

// NewConsumer returns a member of the admissions consumer group writing
// through the service's ledger.
func (svc *Service) NewConsumer() (*admissions.Consumer, error) {
	cfg := svc.Cfg
	return admissions.NewConsumer(admissions.ConsumerConfig{
		Brokers: cfg.Admissions.Brokers, Topic: cfg.Admissions.Topic, Group: cfg.Admissions.Group,
		SessionTimeout: cfg.Admissions.SessionTimeout, MaxPoll: cfg.WriteBatch, Backoff: 2 * cfg.DBTimeout, Metrics: svc.Admitted,
	}, svc.Ledger, svc.Store, svc.Log)
}
