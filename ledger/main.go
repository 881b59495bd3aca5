// Command ledger owns flashgate's Postgres: it writes admitted reservations,
// confirms and releases them, expires abandoned ones, keeps Redis in step with
// the database and reloads Redis after it lost its data.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/migrations"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/httpx"
)

// Config is everything the ledger reads from its environment, read once in main.
type Config struct {
	Addr              string        // LEDGER_ADDR
	DatabaseURL       string        // DATABASE_URL
	RedisURL          string        // REDIS_URL; empty: no flash vouchers
	Token             string        // LEDGER_TOKEN; empty: auth off
	ReservationTTL    time.Duration // RESERVATION_TTL
	ExpiryInterval    time.Duration // EXPIRY_INTERVAL
	ReconcileInterval time.Duration // RECONCILE_INTERVAL
	HangingGrace      time.Duration // HANGING_GRACE
	MaxConns          int32         // DB_MAX_CONNS
	WriteBatch        int           // WRITE_MAX_BATCH: most admitted writes per transaction
}

func configFromEnv() (Config, error) {
	c := Config{
		Addr:        env("LEDGER_ADDR", "127.0.0.1:8081"),
		DatabaseURL: os.Getenv("DATABASE_URL"),
		RedisURL:    os.Getenv("REDIS_URL"),
		Token:       os.Getenv("LEDGER_TOKEN"),
	}
	var err error
	durations := []struct {
		name string
		def  time.Duration
		dst  *time.Duration
	}{
		{"RESERVATION_TTL", 15 * time.Minute, &c.ReservationTTL},
		{"EXPIRY_INTERVAL", time.Minute, &c.ExpiryInterval},
		{"RECONCILE_INTERVAL", time.Minute, &c.ReconcileInterval},
		{"HANGING_GRACE", 30 * time.Second, &c.HangingGrace},
	}
	for _, d := range durations {
		if *d.dst, err = envDuration(d.name, d.def); err != nil {
			return c, err
		}
	}
	n, err := strconv.Atoi(env("DB_MAX_CONNS", "32"))
	if err != nil || n < 2 {
		return c, fmt.Errorf("DB_MAX_CONNS must be an integer >= 2")
	}
	c.MaxConns = int32(n)
	if c.WriteBatch, err = strconv.Atoi(env("WRITE_MAX_BATCH", "256")); err != nil || c.WriteBatch < 1 {
		return c, fmt.Errorf("WRITE_MAX_BATCH must be a positive integer")
	}
	if c.DatabaseURL == "" {
		return c, errors.New("DATABASE_URL is required")
	}
	return c, nil
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s must be a positive duration such as 15m or 30s", name)
	}
	return d, nil
}

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	slog.SetDefault(log)
	cfg, err := configFromEnv()
	if err != nil {
		log.Error("bad configuration", "err", err)
		os.Exit(2)
	}
	if err := run(cfg, log); err != nil {
		log.Error("ledger stopped", "err", err)
		os.Exit(1)
	}
}

func run(cfg Config, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	if err := migrations.MigrateURL(ctx, cfg.DatabaseURL); err != nil {
		return err
	}
	poolCfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	poolCfg.MaxConns = cfg.MaxConns
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	defer pool.Close()

	var rdb redis.UniversalClient
	var g *gate.Gate
	if cfg.RedisURL != "" {
		if rdb, err = gate.NewClient(cfg.RedisURL, gate.ClientOptions{Timeout: time.Second}); err != nil {
			return err
		}
		defer rdb.Close()
		g = gate.New(rdb)
	} else {
		log.Warn("REDIS_URL is not set: flash-sale vouchers will answer 503")
	}
	if cfg.Token == "" {
		log.Warn("LEDGER_TOKEN is not set: authentication is off")
	}

	store := NewStore(pool, cfg.ReservationTTL)
	writer := NewWriter(ctx, store, cfg.WriteBatch, 10*time.Second)
	ledger := NewLedger(store, writer, g, log)
	jobs := NewJobs(ledger, JobsConfig{
		ExpiryInterval: cfg.ExpiryInterval, ReconcileInterval: cfg.ReconcileInterval, HangingGrace: cfg.HangingGrace,
	})
	srv := &Server{ledger: ledger, jobs: jobs, token: cfg.Token, ready: func(c *gin.Context) error {
		if err := store.Ping(c); err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		if rdb != nil {
			if err := rdb.Ping(c).Err(); err != nil {
				return fmt.Errorf("redis: %w", err)
			}
		}
		return nil
	}}

	httpSrv := httpx.NewServer(cfg.Addr, srv.Handler())
	errc := make(chan error, 1)
	go func() { errc <- httpSrv.ListenAndServe() }()
	go jobs.Run(ctx)
	log.Info("ledger listening", "addr", cfg.Addr, "reservation_ttl", cfg.ReservationTTL.String())

	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	case <-ctx.Done():
	}
	log.Info("ledger shutting down")
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return httpSrv.Shutdown(shutCtx)
}
