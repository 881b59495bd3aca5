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
	"syscall"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/migrations"
	"github.com/flashgate/flashgate/shared/envconf"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/httpx"
)

// Config is everything the ledger reads from its environment, read once in main.
type Config struct {
	Addr              string            // LEDGER_ADDR
	DatabaseURL       string            // DATABASE_URL
	RedisURL          string            // REDIS_URL; empty: no flash vouchers
	Token             string            // LEDGER_TOKEN, named "default"; with Tokens empty too: auth off
	Tokens            map[string]string // LEDGER_TOKENS: "name:token,..." named admin tokens (audit actors)
	ReservationTTL    time.Duration     // RESERVATION_TTL
	ExpiryInterval    time.Duration     // EXPIRY_INTERVAL
	ReconcileInterval time.Duration     // RECONCILE_INTERVAL
	HangingGrace      time.Duration     // HANGING_GRACE
	MaxConns          int               // DB_MAX_CONNS
	MinConns          int               // DB_MIN_CONNS: opened at start and kept open
	RedisWarm         int               // REDIS_WARM_CONNS: Redis connections opened at start
	WriteBatch        int               // WRITE_MAX_BATCH: most admitted writes per transaction
	MaxPerVoucher     int               // MAX_INFLIGHT_PER_VOUCHER: standard-path reserves of one voucher at once
	VoucherWait       time.Duration     // VOUCHER_WAIT: longest wait for one of those slots
	DBTimeout         time.Duration     // DB_TIMEOUT: deadline of each statement and connection wait
	httpx.Serving                       // MAX_CONNS, MAX_INFLIGHT, DEBUG_ADDR, SHUTDOWN_DELAY, SHUTDOWN_TIMEOUT
}

// writeTimeout bounds one group commit (and so an admitted write in flight
// when the ledger stops accepting).
const writeTimeout = 10 * time.Second

// minHangingGrace is HANGING_GRACE's floor: an admission younger than the
// grace may still be on its way to the database, and a grace shorter than a
// second would let the reconciler free holds whose writes are still in flight.
// Tests run the jobs fast with a grace of 1 to 2 s.
const minHangingGrace = time.Second

func configFromEnv() (Config, error) { return configFrom(envconf.New()) }

// configFrom reads the Config from e (the environment, or a map in tests).
func configFrom(e *envconf.Reader) (Config, error) {
	c := Config{
		Addr:              e.String("LEDGER_ADDR", "127.0.0.1:8081"),
		DatabaseURL:       e.String("DATABASE_URL", ""),
		RedisURL:          e.String("REDIS_URL", ""),
		Token:             e.String("LEDGER_TOKEN", ""),
		Tokens:            e.Tokens("LEDGER_TOKENS"),
		ReservationTTL:    e.Duration("RESERVATION_TTL", 15*time.Minute),
		ExpiryInterval:    e.Duration("EXPIRY_INTERVAL", time.Minute),
		ReconcileInterval: e.Duration("RECONCILE_INTERVAL", time.Minute),
		HangingGrace:      e.DurationMin("HANGING_GRACE", 30*time.Second, minHangingGrace),
		MaxConns:          e.Int("DB_MAX_CONNS", 32, 2),
		MinConns:          e.Int("DB_MIN_CONNS", 4, 0),
		RedisWarm:         e.Int("REDIS_WARM_CONNS", 4, 0),
		WriteBatch:        e.Int("WRITE_MAX_BATCH", 256, 1),
		MaxPerVoucher:     e.Int("MAX_INFLIGHT_PER_VOUCHER", 16, 1),
		VoucherWait:       e.Duration("VOUCHER_WAIT", 500*time.Millisecond),
		DBTimeout:         e.Duration("DB_TIMEOUT", 500*time.Millisecond),
		Serving:           httpx.ReadServing(e),
	}
	if err := e.Err(); err != nil {
		return c, err
	}
	if c.DatabaseURL == "" {
		return c, errors.New("DATABASE_URL is required")
	}
	if c.MinConns > c.MaxConns {
		return c, fmt.Errorf("DB_MIN_CONNS (%d) must be at most DB_MAX_CONNS (%d)", c.MinConns, c.MaxConns)
	}
	if err := c.Shutdown.Check(writeTimeout, "the group commit's deadline"); err != nil {
		return c, err
	}
	if err := checkVoucherWait(c.VoucherWait); err != nil {
		return c, err
	}
	if err := checkDBTimeout(c.DBTimeout); err != nil {
		return c, err
	}
	return c, checkTokens(c)
}

// checkTokens refuses LEDGER_TOKENS that would make an actor ambiguous: a
// second "default", or LEDGER_TOKEN's token under another name.
func checkTokens(c Config) error {
	if _, dup := c.Tokens[httpx.DefaultActor]; dup && c.Token != "" {
		return errors.New("LEDGER_TOKENS must not name a token default while LEDGER_TOKEN (named default) is set")
	}
	for name, token := range c.Tokens {
		if token == c.Token {
			return fmt.Errorf("LEDGER_TOKENS: %s has the same token as LEDGER_TOKEN", name)
		}
	}
	return nil
}

func main() {
	gin.SetMode(gin.ReleaseMode)
	envconf.Main("ledger", configFromEnv, run)
}

func run(cfg Config, log *slog.Logger) error {
	stopping, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	life := httpx.NewLifecycle(stopping, cfg.Shutdown, log)
	defer life.End()
	ctx := life.Context() // what requests wait on outlives the drain

	if err := migrations.MigrateURL(stopping, cfg.DatabaseURL); err != nil {
		return err
	}
	pool, err := openPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	go warmPostgres(stopping, pool, cfg.MinConns, log) // beside serving: a slow dependency never delays the start

	var rdb redis.UniversalClient
	var g *gate.Gate
	if cfg.RedisURL != "" {
		if rdb, err = gate.NewClient(cfg.RedisURL, gate.ClientOptions{Timeout: time.Second}); err != nil {
			return err
		}
		defer rdb.Close()
		go warmRedis(stopping, rdb, cfg.RedisWarm, log)
		g = gate.New(rdb)
	} else {
		log.Warn("REDIS_URL is not set: flash-sale vouchers will answer 503")
	}
	if cfg.Token == "" && len(cfg.Tokens) == 0 {
		log.Warn("LEDGER_TOKEN and LEDGER_TOKENS are not set: authentication is off")
	}

	store := NewStore(pool, cfg.ReservationTTL)
	metrics := httpx.NewMetrics("ledger")
	lm := newLedgerMetrics(metrics.Registry)
	writer := NewWriter(ctx, store, cfg.WriteBatch, writeTimeout)
	writer.ObserveSizes(func(n int) { lm.writeBatch.Observe(float64(n)) })
	writer.ObserveCommits(func(d time.Duration) { lm.commitLatency.Observe(d.Seconds()) })
	settler := NewSettler(store, g, time.Now, log)
	ledger := NewLedger(store, writer, g, rdb, settler, log)
	ledger.LimitStandard(NewLimiter(cfg.MaxPerVoucher, cfg.VoucherWait))
	jobs := NewJobs(store, g, rdb, settler, ledger.Warmup, log, JobsConfig{
		ExpiryInterval: cfg.ExpiryInterval, ReconcileInterval: cfg.ReconcileInterval, HangingGrace: cfg.HangingGrace,
		Metrics: lm,
	})
	srv := &Server{log: log, ledger: ledger, jobs: jobs, token: cfg.Token, tokens: cfg.Tokens, metrics: metrics, maxInflight: cfg.MaxInflight,
		hangingGrace: cfg.HangingGrace, ready: func(c *gin.Context) error {
			// Ready while Postgres answers: without Redis, standard vouchers,
			// confirm and release still work (flash reserves get a fast 503).
			if err := life.Err(); err != nil {
				return err
			}
			if err := store.Ping(c); err != nil {
				return fmt.Errorf("postgres: %w", err)
			}
			return nil
		}}

	httpx.ServeDebug(cfg.DebugAddr, log)
	jobsDone := make(chan struct{})
	go func() {
		defer close(jobsDone)
		jobs.Run(stopping, ctx) // a run in progress at the signal finishes
	}()
	if rdb != nil {
		// Another ledger's admin change reaches this one's terms cache at once.
		go gate.WatchChanges(ctx, rdb, store.ForgetTerms, log)
	}
	log.Info("ledger listening", "addr", cfg.Addr, "reservation_ttl", cfg.ReservationTTL.String())
	err = life.Serve(httpx.NewServer(cfg.Addr, srv.Handler()), cfg.MaxClientConns)
	stop() // when serving failed, the jobs stop too
	<-jobsDone
	log.Info("ledger stopped")
	return err
}

// openPool is the Postgres pool: DB_MAX_CONNS, DB_MIN_CONNS kept open, and
// DB_TIMEOUT on every statement. It connects on demand (warmPostgres opens
// the first connections).
func openPool(ctx context.Context, cfg Config) (*pgxpool.Pool, error) {
	poolCfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	poolCfg.MaxConns = int32(cfg.MaxConns)
	poolCfg.MinConns = int32(cfg.MinConns)
	withStatementDeadlines(poolCfg, cfg.DBTimeout)
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	return pool, nil
}
