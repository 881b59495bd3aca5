package main

import (
	"context"
	"fmt"

	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Report is what one reconciliation of a voucher found and did.
type Report struct {
	Code                string `json:"code"`
	DBRemaining         int64  `json:"dbRemaining"`
	RedisRemaining      int64  `json:"redisRemaining"`      // before
	RedisRemainingAfter int64  `json:"redisRemainingAfter"` // after
	Drift               int64  `json:"drift"`               // redisRemaining - dbRemaining, before
	Released            int    `json:"released"`            // hanging admissions freed in Redis
	Restored            int    `json:"restored"`            // DB-active orders put back into Redis
	Reloaded            bool   `json:"reloaded"`            // Redis did not hold the voucher: loaded from the DB
}

// Reconcile brings one flash voucher's Redis state into agreement with the
// database, under a per-voucher advisory lock so that one ledger does it at a
// time. Admissions in Redis with no DB row are freed once older than the grace
// period (their write can no longer be in flight); DB-active orders Redis lacks
// are restored; remaining becomes total_limit minus the uses Redis now holds,
// which never exceeds what the database allows.
func (j *Jobs) Reconcile(ctx context.Context, code string) (Report, error) {
	if j.gate == nil {
		return Report{}, errNoGate
	}
	rep := Report{Code: code}
	err := j.store.WithVoucherLock(ctx, code, func() error {
		v, orders, err := j.store.Snapshot(ctx, code)
		if err != nil {
			return err
		}
		if !v.FlashSale {
			return voucher.Errorf(voucher.CodeInvalidRequest, "voucher %s is not a flash-sale voucher", code)
		}
		rep.DBRemaining = int64(v.Remaining)
		active := make([]gate.Order, len(orders))
		for i, o := range orders {
			active[i] = gate.Order{OrderID: o.OrderID, CustomerID: o.CustomerID}
		}
		res, err := j.gate.Reconcile(ctx, code, v, active, j.cfg.HangingGrace)
		if err != nil {
			return fmt.Errorf("reconcile %s in redis: %w", code, err)
		}
		if !res.Loaded {
			rep.Reloaded = true
			rep.RedisRemaining = 0
			if err := j.warm(ctx, code); err != nil {
				return err
			}
			rep.RedisRemainingAfter = rep.DBRemaining
			return nil
		}
		rep.RedisRemaining, rep.RedisRemainingAfter = res.RemainingBefore, res.RemainingAfter
		rep.Drift = res.RemainingBefore - rep.DBRemaining
		rep.Released, rep.Restored = len(res.Released), res.Restored
		return nil
	})
	if err != nil {
		return Report{}, err
	}
	j.observe(rep)
	if rep.Drift != 0 || rep.Released > 0 || rep.Restored > 0 || rep.Reloaded {
		j.log.Warn("reconcile found drift", "code", code, "db_remaining", rep.DBRemaining,
			"redis_remaining", rep.RedisRemaining, "redis_remaining_after", rep.RedisRemainingAfter,
			"drift", rep.Drift, "released", rep.Released, "restored", rep.Restored, "reloaded", rep.Reloaded)
	}
	return rep, nil
}

// ReconcileAll reconciles every live flash voucher and returns the reports.
func (j *Jobs) ReconcileAll(ctx context.Context) []Report {
	if j.gate == nil {
		return nil
	}
	codes, err := j.store.LiveFlashVouchers(ctx)
	if err != nil {
		j.log.Error("reconcile: list vouchers", "err", err)
		return nil
	}
	var reps []Report
	for _, code := range codes {
		rep, err := j.Reconcile(ctx, code)
		if err != nil {
			j.log.Error("reconcile failed", "code", code, "err", err)
			continue
		}
		reps = append(reps, rep)
	}
	j.log.Info("reconcile run", "vouchers", len(codes), "reconciled", len(reps))
	return reps
}

// observe exports one reconciliation's report.
func (j *Jobs) observe(rep Report) {
	m := j.cfg.Metrics
	m.reconcileDrift.Set(float64(rep.Drift), rep.Code)
	m.remaining.Set(float64(rep.DBRemaining), rep.Code, "db")
	m.remaining.Set(float64(rep.RedisRemainingAfter), rep.Code, "redis")
	m.reconcileFixes.WithLabelValues("released").Add(float64(rep.Released))
	m.reconcileFixes.WithLabelValues("restored").Add(float64(rep.Restored))
	if rep.Reloaded {
		m.reconcileFixes.WithLabelValues("reloaded").Inc()
	}
}
