package jobs

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/flashgate/flashgate/ledger/internal/sale"
	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Report is what one reconciliation of a voucher found and did.
type Report struct {
	Code                string `json:"code"`
	DBRemaining         int64  `json:"dbRemaining"`
	RedisRemaining      int64  `json:"redisRemaining"`      // before
	RedisRemainingAfter int64  `json:"redisRemainingAfter"` // after
	Drift               int64  `json:"drift"`               // redisRemaining - dbRemaining, before; at least restored
	Released            int    `json:"released"`            // hanging admissions freed in Redis
	Restored            int    `json:"restored"`            // DB-active orders put back into Redis
	Reloaded            bool   `json:"reloaded"`            // Redis did not hold the voucher: loaded from the DB
	// scheduled: the voucher had not started by Redis's clock at the read.
	// Its code is kept off the per-voucher gauges: /metrics is read without
	// a token, and a scheduled code is the one a bot wants before the sale.
	scheduled bool
}

// Reconcile brings one flash voucher's Redis state into agreement with the
// database, under a per-voucher advisory lock so that one ledger does it at a
// time, and not while an admin change is being applied to Redis. Redis takes
// the database's current terms (a change whose gate.Update was lost is applied
// here). Admissions in Redis with no DB row are freed once older than the
// grace period (their write can no longer be in flight); DB-active orders
// Redis lacks are restored; remaining becomes total_limit minus the uses Redis
// now holds, which never exceeds what the database allows. A reconcile that
// repaired something (repairKinds) or reloaded the voucher is audited under
// ReconcilerActor.
func (j *Jobs) Reconcile(ctx context.Context, code string) (Report, error) {
	return j.ReconcileBy(ctx, code, store.ReconcilerActor)
}

// ReconcileBy is Reconcile asked for by actor (the admin route's token name).
func (j *Jobs) ReconcileBy(ctx context.Context, code, actor string) (Report, error) {
	if j.gate == nil {
		return Report{}, sale.ErrNoGate
	}
	var rep Report
	var fix counterFix
	err := j.store.WithVoucherLock(ctx, code, func(ctx context.Context) (err error) {
		rep, fix, err = j.reconcileLocked(ctx, code)
		return err
	})
	if err != nil {
		return Report{}, err
	}
	kinds := repairKinds(rep, fix)
	j.observe(rep, kinds)
	fixed := len(kinds) > 0 || rep.Reloaded
	if fixed || rep.Drift != 0 {
		j.log.Warn("reconcile found drift", "code", code, "db_remaining", rep.DBRemaining,
			"redis_remaining", rep.RedisRemaining, "redis_remaining_after", rep.RedisRemainingAfter,
			"drift", rep.Drift, "released", rep.Released, "restored", rep.Restored, "reloaded", rep.Reloaded,
			"remaining_repaired", fix.remaining, "terms_rewritten", fix.terms, "actor", actor,
			"released_orders", fix.released, "restored_orders", fix.restored)
	}
	if rep.Released > 0 || rep.Restored > 0 || fix.remaining {
		// Stock came back, or orders did: a proxy's sold-out flag may be stale.
		sale.PublishChange(context.WithoutCancel(ctx), j.pub, code, j.log)
	}
	if fixed {
		before := sale.GateState{Loaded: !rep.Reloaded, Remaining: rep.RedisRemaining}
		after := ReconcileAudit{Report: rep, Repairs: kinds, ReleasedOrders: fix.released, RestoredOrders: fix.restored}
		if err := j.store.AddAudit(context.WithoutCancel(ctx), code, actor, store.ActionReconcile, before, after); err != nil {
			j.log.Error("reconcile not audited", "code", code, "err", err) // Redis was fixed all the same
		}
	}
	return rep, nil
}

// ReconcileAudit is a reconcile's audit row after: its report and the kinds
// of what it repaired.
type ReconcileAudit struct {
	Report
	Repairs []string `json:"repairs,omitempty"`
	// The orders it freed and restored, for whoever reads why.
	ReleasedOrders []string `json:"releasedOrders,omitempty"`
	RestoredOrders []string `json:"restoredOrders,omitempty"`
}

// changedRecently reports whether code's terms were changed (or it was
// created) within twice HANGING_GRACE; an unreadable answer is false.
func (j *Jobs) changedRecently(ctx context.Context, code string) bool {
	recent, err := j.store.ChangedWithin(ctx, code, 2*j.Config.HangingGrace)
	return err == nil && recent
}

// counterFix is what a reconcile repaired in Redis beside its orders, which
// Report does not carry.
type counterFix struct {
	remaining bool // the counter disagreed with the orders Redis held
	terms     bool // meta's terms differed from the database's
	// The orders freed, and those restored (at most: the pass's candidates
	// still held by the database after it).
	released, restored []string
}

// The kinds of flashgate_reconcile_repairs_total.
const (
	repairRemaining = "remaining"
	repairRestored  = "orders_restored"
	repairReleased  = "orders_released"
	repairTerms     = "terms"
)

var repairKindNames = []string{repairRemaining, repairRestored, repairReleased, repairTerms}

// repairKinds lists what one reconcile repaired, by kind. A reload is not a
// repair: a voucher is also not loaded before its first sale.
func repairKinds(rep Report, fix counterFix) []string {
	var kinds []string
	for _, k := range []struct {
		kind string
		did  bool
	}{
		{repairRemaining, fix.remaining},
		{repairRestored, rep.Restored > 0},
		{repairReleased, rep.Released > 0},
		{repairTerms, fix.terms},
	} {
		if k.did {
			kinds = append(kinds, k.kind)
		}
	}
	return kinds
}

// reconcileLocked is one reconciliation, under the voucher's lock.
func (j *Jobs) reconcileLocked(ctx context.Context, code string) (rep Report, fix counterFix, err error) {
	rep.Code = code
	// Redis's clock before the database's read: a hold with no row is freed
	// only if it was older than the grace when the database was read, not
	// when the pass reaches it (a Redis pause or a slow machine between the
	// two freed holds whose rows committed after the read, and refused their
	// retries until the next pass restored them: the chaos soak's
	// redis-pause round beside a CPU hog, 2026-12-05).
	readAt, err := j.gate.Clock(ctx, code)
	if err != nil {
		return Report{}, fix, fmt.Errorf("reconcile %s: %w", code, err)
	}
	v, orders, err := j.store.Snapshot(ctx, code)
	if err != nil {
		return Report{}, fix, err
	}
	if !v.FlashSale {
		return Report{}, fix, voucher.Errorf(voucher.CodeInvalidRequest, "voucher %s is not a flash-sale voucher", code)
	}
	rep.DBRemaining = int64(v.Remaining)
	rep.scheduled = readAt < v.StartsAt.UnixMilli()
	active := make([]gate.Order, len(orders))
	for i, o := range orders {
		active[i] = gate.Order{OrderID: o.OrderID, CustomerID: o.CustomerID}
	}
	res, err := j.gate.ReconcileDetailed(ctx, code, v, active, readAt, j.graceOf(v))
	if err != nil {
		return Report{}, fix, fmt.Errorf("reconcile %s in redis: %w", code, err)
	}
	if !res.Loaded {
		if err := j.warm(ctx, code); err != nil {
			return Report{}, fix, err
		}
		rep.Reloaded, rep.RedisRemainingAfter = true, rep.DBRemaining
		return rep, fix, nil
	}
	rep.RedisRemaining, rep.RedisRemainingAfter = res.RemainingBefore, res.RemainingAfter
	if err := j.raced(ctx, code, orders, readAt, res, &rep, &fix); err != nil {
		return Report{}, fix, err
	}
	// Each order Redis lost is a use it could hand out again (a retry of the
	// order refused meanwhile), even when remaining agreed (both at 0).
	rep.Drift = res.RemainingBefore - rep.DBRemaining
	if rep.Restored > 0 {
		rep.Drift = max(rep.Drift, int64(rep.Restored))
	}
	fix.remaining, fix.terms = res.CounterRepaired, res.TermsChanged
	if fix.terms {
		// Under the voucher's lock a change is never half-applied by a live
		// ledger: terms that differ are a change whose ledger died, or whose
		// Redis step failed, between its commit and Redis. Finishing a change
		// committed within twice the grace is that change's last step, not a
		// repair of a drift.
		if j.changedRecently(ctx, code) {
			fix.terms = false
			j.log.Info("reconcile applied the terms of a change its ledger did not bring to Redis", "code", code)
		}
	}
	return rep, fix, nil
}

// raced sets rep's and fix's orders from the pass's result, less those that
// raced it rather than drifted: a restored order of the snapshot that
// finished while the steps ran (the database, then Redis), which is settled
// again at once, and a freed order whose row was written after the
// snapshot (a log voucher's consumer commits its row, then removes its
// promise, between the database's read and Redis's step), which is held
// again. Neither was lost by Redis: their repairs, undone, are none. Nor is
// the restore of an order confirmed within HANGING_GRACE before the pass
// (readAt, Redis's clock in unix millis): a late payment took its use again
// in the database and its Redis step was still to come; the pass did that
// step first.
func (j *Jobs) raced(ctx context.Context, code string, orders []store.ActiveOrder, readAt int64, res gate.ReconcileDetail,
	rep *Report, fix *counterFix) error {
	rep.Released, rep.Restored = len(res.Released), res.Restored
	fix.released, fix.restored = res.Released, res.Restoring
	if res.Restored > 0 {
		gone, err := j.settleFinished(ctx, code, orders)
		if err != nil {
			return err
		}
		confirming := map[string]bool{}
		for _, o := range orders {
			if !o.ConfirmedAt.IsZero() && readAt-o.ConfirmedAt.UnixMilli() < j.Config.HangingGrace.Milliseconds() {
				confirming[o.OrderID] = true
			}
		}
		fix.restored = slices.DeleteFunc(slices.Clone(res.Restoring), func(id string) bool {
			return slices.Contains(gone, id) || confirming[id]
		})
		rep.Restored = max(0, res.Restored-(len(res.Restoring)-len(fix.restored)))
	}
	if len(res.Released) > 0 {
		written, err := j.heldAfterAll(ctx, code, res.Released)
		if err != nil {
			return err
		}
		fix.released = slices.DeleteFunc(slices.Clone(res.Released), func(id string) bool { return slices.Contains(written, id) })
		rep.Released = len(fix.released)
	}
	return nil
}

// heldAfterAll makes Redis agree with the database about the orders a pass
// freed (Settler.Agree) and returns those the database holds a use for now.
func (j *Jobs) heldAfterAll(ctx context.Context, code string, freed []string) ([]string, error) {
	now, err := j.store.ActiveOf(ctx, code, freed)
	if err != nil {
		return nil, err
	}
	if len(now) == 0 {
		return nil, nil
	}
	held := make([]string, len(now))
	for i, o := range now {
		held[i] = o.OrderID
	}
	return held, j.settler.Agree(ctx, code, freed)
}

// settleFinished makes Redis agree with the database about those of the
// snapshot's orders that no longer hold a use (Settler.Agree).
func (j *Jobs) settleFinished(ctx context.Context, code string, snapshot []store.ActiveOrder) ([]string, error) {
	ids := make([]string, len(snapshot))
	for i, o := range snapshot {
		ids[i] = o.OrderID
	}
	now, err := j.store.ActiveOf(ctx, code, ids)
	if err != nil {
		return nil, err
	}
	still := make(map[string]bool, len(now))
	for _, o := range now {
		still[o.OrderID] = true
	}
	var gone []string
	for _, id := range ids {
		if !still[id] {
			gone = append(gone, id)
		}
	}
	return gone, j.settler.Agree(ctx, code, gone)
}

// reconcileAll reconciles every live flash voucher that has changed since its
// last clean reconcile by this ledger (see cleanMark), and every tenth run all
// of them; it returns the reports of those it reconciled.
func (j *Jobs) reconcileAll(ctx context.Context) []Report {
	if j.gate == nil {
		return nil
	}
	live, err := j.store.LiveFlashVersions(ctx)
	if err != nil {
		j.log.Error("reconcile: list vouchers", "err", err)
		return nil
	}
	full := j.clean.nextRun()
	var reps []Report
	skipped := 0
	for _, lv := range live {
		if !full && j.unchanged(ctx, lv) {
			skipped++
			continue
		}
		rep, err := j.Reconcile(ctx, lv.Code)
		if err != nil {
			j.clean.forget(lv.Code)
			j.log.Error("reconcile failed", "code", lv.Code, "err", err)
			continue
		}
		reps = append(reps, rep)
		j.markIfClean(ctx, lv, rep)
	}
	j.clean.keep(live)
	j.Config.Metrics.reconcileSkipped.Add(float64(skipped))
	j.log.Info("reconcile run", "vouchers", len(live), "reconciled", len(reps), "unchanged", skipped, "full", full)
	return reps
}

// reconcileInherited reconciles at once every live flash voucher whose Redis
// state the serving Redis process did not write from the database
// (gate.GenInherited): a restart from a snapshot or an append-only file, or a
// failover, may have lost orders the database committed since, whose retries
// the gate would refuse until the next ReconcileAll. It runs every second; it
// stops at the first Redis error (a Redis that is down has nothing to check).
func (j *Jobs) reconcileInherited(ctx context.Context) []Report {
	if j.gate == nil {
		return nil
	}
	codes, err := j.store.LiveFlashVouchers(ctx)
	if err != nil {
		return nil // the database does not answer: the periodic reconcile logs that
	}
	var reps []Report
	for _, code := range codes {
		gen, err := j.gate.Generation(ctx, code)
		if err != nil {
			return reps
		}
		if gen != gate.GenInherited {
			continue
		}
		rep, err := j.Reconcile(ctx, code)
		if err != nil {
			j.log.Error("reconcile inherited redis state", "code", code, "err", err)
			continue
		}
		j.log.Warn("redis state not written by this redis process (restart, failover): reconciled",
			"code", code, "drift", rep.Drift, "restored", rep.Restored, "released", rep.Released)
		reps = append(reps, rep)
	}
	return reps
}

// observe exports one reconciliation's report and what it repaired.
func (j *Jobs) observe(rep Report, kinds []string) {
	m := j.Config.Metrics
	for _, kind := range kinds {
		m.ReconcileRepairs.WithLabelValues(kind).Inc()
	}
	if !rep.scheduled {
		m.reconcileDrift.Set(float64(rep.Drift), rep.Code)
		m.remaining.Set(float64(rep.DBRemaining), rep.Code, "db")
		m.remaining.Set(float64(rep.RedisRemainingAfter), rep.Code, "redis")
	}
	m.ReconcileFixes.WithLabelValues("released").Add(float64(rep.Released))
	m.ReconcileFixes.WithLabelValues("restored").Add(float64(rep.Restored))
	if rep.Reloaded {
		m.ReconcileFixes.WithLabelValues("reloaded").Inc()
	}
}

// neverFree is a grace no hold outlives: the reconciler frees none.
const neverFree = 100 * 365 * 24 * time.Hour

// graceOf is how old a Redis hold of v with no row must be before the
// reconciler frees it: HANGING_GRACE, and for a log voucher the consumer
// group's lag on top (LogLag: every record acknowledged longer ago is
// committed, and no produce of this ledger is in flight longer), since a
// record still in the log is a hold whose row is coming.
func (j *Jobs) graceOf(v voucher.Voucher) time.Duration {
	if v.WritePath != voucher.WritePathLog {
		return j.Config.HangingGrace
	}
	if j.Config.LogLag == nil {
		return neverFree
	}
	lag, known := j.Config.LogLag()
	if !known {
		return neverFree
	}
	// Twice the lag: a margin over the clocks of Redis, the broker and
	// this ledger, which measure the hold's age and the lag. Twice the grace:
	// an order a proxy could not learn the fate of is parked with a settler
	// within HANGING_GRACE of its admission (above LEDGER_TIMEOUT) and settled
	// there HANGING_GRACE and the lag later; the reconciler, whose free would
	// be a repair, comes after it (found by the log VOPR: at one grace it
	// freed such orders first).
	return 2*j.Config.HangingGrace + 2*lag
}
