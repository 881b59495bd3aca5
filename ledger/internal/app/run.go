package app

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/ledger/internal/admissions"
	"github.com/flashgate/flashgate/ledger/internal/outbox"
	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/envconf"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/httpx"
)

// Run serves the ledger wired from cfg until SIGINT or SIGTERM, then drains it.
func Run(cfg Config, log *slog.Logger) error {
	// The address first: a taken port stops the start before anything is
	// contacted or said to listen.
	p, err := httpx.Start("ledger", "LEDGER_ADDR", cfg.Addr, cfg.Serving, log)
	if err != nil {
		return err
	}
	defer p.Close()
	stopping := p.Stopping()
	ctx := p.Context() // what requests wait on outlives the drain
	redis.SetLogger(gate.NewLogger(log))
	svc, closeAll, err := Build(ctx, cfg, log, p.Err)
	if err != nil {
		return databaseErr(err)
	}
	defer closeAll()
	// Beside serving: a slow dependency never delays the start.
	go svc.Store.Warm(stopping, cfg.MinConns, log)
	if svc.RDB != nil {
		go warmRedis(stopping, svc.RDB, cfg.RedisWarm, log)
		// Another ledger's admin change reaches this one's terms cache at once.
		go gate.WatchChanges(ctx, svc.RDB, svc.Store.ForgetTerms, log)
	} else {
		log.Warn("REDIS_URL is not set: flash-sale vouchers will answer 503")
	}
	if cfg.OpenAdmin {
		log.Warn("LEDGER_AUTH=off: every route is open without a token; anyone who reaches the ledger can change, list or export vouchers and write admitted reservations")
	}
	p.ServeMetrics(svc.Metrics)
	jobsDone, err := svc.startBackground(ctx, stopping.Done())
	if err != nil {
		return err
	}
	err = p.Serve(svc.Server.Handler(), "reservation_ttl", cfg.ReservationTTL.String())
	<-jobsDone // Serve ended Stopping: when serving failed, the jobs stop too
	// The drained requests may have parked writes that failed on a fault:
	// settle them now, or their Redis uses would wait for a reconcile.
	if n := svc.Settler.Drain(ctx); n > 0 {
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
func (svc *Service) startBackground(ctx context.Context, stop <-chan struct{}) (<-chan struct{}, error) {
	cfg := svc.Cfg
	sinks, closeSinks, err := cfg.Events.Sinks(svc.Outbox)
	if err != nil {
		return nil, err
	}
	consumer := svc.Consumer
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
		go svc.Lag.Run(cctx, admissions.LagInterval)
		if err := consumer.Run(cctx); err != nil {
			svc.Log.Error("admissions consumer did not start: log vouchers' admissions are not written", "err", err)
		}
	}()
	go func() {
		defer wg.Done()
		svc.Jobs.Run(ctx, stop)
	}()
	go func() {
		defer wg.Done()
		defer closeSinks()
		if !cfg.Events.On {
			svc.Log.Warn("EVENTS=off: no events are written or delivered (for measuring their cost only)")
			return
		}
		outbox.NewDispatcher(svc.Store, sinks, svc.Log, outbox.DispatcherConfig{
			DatabaseURL: cfg.DatabaseURL, Retention: cfg.Events.Retention, Metrics: svc.Outbox,
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
