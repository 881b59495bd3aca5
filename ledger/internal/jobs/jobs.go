// Package jobs is the ledger's background work: the expiry sweeper, the
// reconciler of Redis against the database (and which vouchers a run may
// skip), and the reload of live flash vouchers at start.
package jobs

import (
	"context"
	"log/slog"
	"time"

	"github.com/flashgate/flashgate/ledger/internal/sale"
	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/gate"
)

// Config sets how often the background jobs run.
type Config struct {
	ExpiryInterval    time.Duration
	ReconcileInterval time.Duration
	HangingGrace      time.Duration // an admission younger than this may still be on its way to the DB
	// LogLag is the admissions consumer group's lag (admissions.GroupLag;
	// known false until it can tell): a writePath log voucher's records
	// wait in the log for that long, so the reconciler frees a hold of one
	// only past HangingGrace plus twice the lag. nil: never.
	LogLag func() (lag time.Duration, known bool)
	// RetakeStale produces again the records of a log voucher's promises
	// that a ledger left pending (sale.Ledger.RetakeStale), every
	// RetakeEvery for each live flash voucher. nil: never.
	RetakeStale func(ctx context.Context, code string) (int, error)
	ExpiryBatch int      // rows per sweep transaction; default 500
	Metrics     *Metrics // nil: not exported
}

// Jobs are the ledger's background work: the expiry sweeper, the reconciler and
// the Redis reload at start. Every job is safe with several ledgers running.
type Jobs struct {
	store   *store.Store
	gate    *gate.Gate     // nil when no Redis is configured: only the sweep runs
	pub     gate.Publisher // announces vouchers whose stock came back; nil without Redis
	settler *sale.Settler
	warm    func(ctx context.Context, code string) error
	Config  Config
	log     *slog.Logger
	clean   cleanMarks // what ReconcileAll may skip
}

// New returns the jobs over store and g (g may be nil); pub (nil without
// Redis) announces the vouchers a sweep gave uses back to. settler is the
// requests' own, so that the orders they park are resolved here; warm loads a
// voucher into Redis, shared with the requests so that one load serves both.
func New(st *store.Store, g *gate.Gate, pub gate.Publisher, settler *sale.Settler,
	warm func(ctx context.Context, code string) error, log *slog.Logger, cfg Config) *Jobs {
	if cfg.ExpiryBatch <= 0 {
		cfg.ExpiryBatch = 500
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	return &Jobs{store: st, gate: g, pub: pub, settler: settler, warm: warm, Config: cfg, log: log}
}

// Run reloads live flash vouchers that Redis lacks, then sweeps and reconciles
// on their intervals until stop closes. Each run goes under ctx (the
// service's lifetime): a run in progress when stop closes finishes, so that a
// shutdown never cuts a sweep or a reconcile between the database and Redis.
func (j *Jobs) Run(ctx context.Context, stop <-chan struct{}) {
	j.WarmAll(ctx)
	sweep := time.NewTicker(j.Config.ExpiryInterval)
	defer sweep.Stop()
	reconcile := time.NewTicker(j.Config.ReconcileInterval)
	defer reconcile.Stop()
	unsettled := time.NewTicker(time.Second)
	defer unsettled.Stop()
	retake := time.NewTicker(RetakeEvery)
	defer retake.Stop()
	for {
		select {
		case <-stop: // before a tick that is due as well
			return
		default:
		}
		select {
		case <-stop:
			return
		case <-sweep.C:
			if n, err := j.Sweep(ctx); err != nil {
				j.log.Error("expiry sweep failed", "released", n, "err", err)
			} else {
				j.log.Info("expiry sweep", "released", n)
			}
		case <-reconcile.C:
			j.reconcileAll(ctx)
		case <-unsettled.C:
			if n := j.settler.Resolve(ctx); n > 0 {
				j.log.Info("settled writes that failed on a fault", "orders", n)
			}
			j.reconcileInherited(ctx) // after a Redis restart or failover: within a second
		case <-retake.C:
			j.RetakeAll(ctx)
		}
	}
}

// RetakeEvery is how often the jobs look for work another ledger left
// behind: promises left pending (a promise is stale 10 s after its
// admission, sale.RetakeStale, so one is produced again within 15 s) and
// orders parked in Redis by a settler that is gone (Settler.Adopt).
const RetakeEvery = 5 * time.Second

// RetakeAll adopts, for every live flash voucher, the parked orders no
// settler here tracks, and runs Config.RetakeStale.
func (j *Jobs) RetakeAll(ctx context.Context) {
	if j.gate == nil {
		return
	}
	codes, err := j.store.LiveFlashVouchers(ctx)
	if err != nil {
		j.log.Error("retake stale promises: list the flash vouchers", "err", err)
		return
	}
	for _, code := range codes {
		if n, err := j.settler.Adopt(ctx, code, j.Config.HangingGrace); err != nil {
			j.log.Error("adopt parked orders", "code", code, "err", err)
		} else if n > 0 {
			j.log.Warn("parked orders of another settler adopted", "code", code, "orders", n)
		}
		if j.Config.RetakeStale == nil {
			continue
		}
		if n, err := j.Config.RetakeStale(ctx, code); err != nil {
			j.log.Error("retake stale promises", "code", code, "orders", n, "err", err)
		}
	}
}

// WarmAll loads every live flash voucher that Redis does not hold (Load never
// overwrites one it holds).
func (j *Jobs) WarmAll(ctx context.Context) {
	if j.gate == nil {
		return
	}
	codes, err := j.store.LiveFlashVouchers(ctx)
	if err != nil {
		j.log.Error("warm flash vouchers", "err", err)
		return
	}
	for _, code := range codes {
		if err := j.warm(ctx, code); err != nil {
			j.log.Error("warm flash voucher", "code", code, "err", err)
		}
	}
}
