package systemtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/flashgate/flashgate/shared/gate"
)

// The faults, injected from outside the services: delays at the seams
// (Postgres rows held locked by another session, Redis paused for writes) and,
// in the rounds that destroy data, a flash voucher's Redis keys deleted (data
// loss) and then warmed up. The clients' own hang-ups and short deadlines are
// the drivers' (voprDriverMix).
var voprFaultMix = []voprFault{
	{"lock-voucher", 30, false}, {"lock-usage", 20, false}, {"lock-usage+patch", 8, false},
	{"pause-redis", 25, false}, {"delete-redis-keys", 12, true},
}

// voprFault is a fault and its weight; destroys: only in the rounds that
// destroy Redis data.
type voprFault struct {
	kind     string
	weight   int
	destroys bool
}

// inject runs faults one after another until stop, chosen from the seed.
func (run *voprRun) inject(stop <-chan struct{}) {
	r := run.r
	rng := rand.New(rand.NewPCG(r.seed, 2000))
	mix := voprFaultMix[:0:0]
	for _, f := range voprFaultMix {
		if !f.destroys || r.destroys {
			mix = append(mix, f)
		}
	}
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(40+rng.IntN(200)) * time.Millisecond):
		}
		f := pickWeighted(rng, mix, func(f voprFault) int { return f.weight })
		v := r.vouchers[rng.IntN(len(r.vouchers))]
		hold := time.Duration(10+rng.IntN(390)) * time.Millisecond
		customer := int64(rng.IntN(r.customers) + 1)
		op := voprOp{actor: "fault", kind: f.kind, code: v.code, start: run.h.now()}
		ok, err := run.applyFault(rng, f.kind, v, hold, customer, &op)
		if !ok {
			continue
		}
		op.end = run.h.now()
		op.answer = voprAnswer{status: 200}
		if err != nil {
			op.answer = voprAnswer{note: err.Error()}
		}
		run.h.add(op)
		run.faults.Add(1)
		run.stats.fault(f.kind)
	}
}

// applyFault injects one fault of kind on voucher v (hold: how long a lock is
// held; customer: whose usage row), describing it in op; false when the
// fault does not apply to v.
func (run *voprRun) applyFault(rng *rand.Rand, kind string, v voprVoucher, hold time.Duration, customer int64, op *voprOp) (bool, error) {
	var err error
	switch kind {
	case "lock-voucher":
		op.detail = "for " + hold.String()
		err = run.lockRows(`SELECT 1 FROM voucher WHERE code = $1 FOR UPDATE`, hold, v.code)
	case "lock-usage":
		if rng.IntN(2) == 0 {
			op.detail = "all customers for " + hold.String()
			err = run.lockRows(voprLockUsageSQL, hold, v.code)
		} else {
			op.detail = fmt.Sprintf("customer %d for %v", customer, hold)
			err = run.lockRows(`SELECT 1 FROM voucher_customer_usage WHERE voucher_code = $1 AND customer_id = $2 FOR UPDATE`,
				hold, v.code, customer)
		}
	case "lock-usage+patch":
		// A perUserLimit PATCH (voucher row, then the customers' usage rows)
		// while group commits wait on the usage rows (which they lock before
		// the voucher row): the seam of a lock-order deadlock.
		limit := 1 + rng.IntN(3)
		op.detail = fmt.Sprintf("all customers for %v, PATCH perUserLimit %d meanwhile", hold, limit)
		patched := make(chan struct{})
		go func() {
			defer close(patched)
			time.Sleep(hold / 3)
			run.adminOp("fault", "patch-perUser", v.code, map[string]any{"perUserLimit": limit})
		}()
		err = run.lockRows(voprLockUsageSQL, hold, v.code)
		<-patched
	case "pause-redis":
		ms := 5 + rng.IntN(195)
		op.detail = fmt.Sprintf("CLIENT PAUSE %d WRITE", ms)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = run.s.rdb.Do(ctx, "CLIENT", "PAUSE", ms, "WRITE").Err()
		cancel()
		time.Sleep(time.Duration(ms) * time.Millisecond)
	case "delete-redis-keys":
		if !v.flash {
			return false, nil
		}
		run.destroyed.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = run.s.rdb.Del(ctx, gate.Keys(v.code)...).Err()
		cancel()
		// The proxy may meet NOT_LOADED first and have the ledger warm it
		// up; the admin warmup comes after a moment either way.
		wait := time.Duration(rng.IntN(150)) * time.Millisecond
		op.detail = "then warmup after " + wait.String()
		time.Sleep(wait)
		run.warmup(v.code, "fault")
	}
	return true, err
}

// voprLockUsageSQL locks a voucher's usage rows in the ledger's lock order
// (by customer, as its group commit and sweeper take them), so that the
// fault's session delays the ledger's statements but never closes a deadlock
// cycle with one that keeps that order.
const voprLockUsageSQL = `SELECT 1 FROM voucher_customer_usage WHERE voucher_code = $1 ORDER BY customer_id FOR UPDATE`

// lockRows holds the rows query selects FOR UPDATE from its own Postgres
// session for hold, then commits: the ledger's statements on them wait (and
// those under DB_TIMEOUT give up) meanwhile.
func (run *voprRun) lockRows(query string, hold time.Duration, args ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), hold+5*time.Second)
	defer cancel()
	tx, err := run.s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	rows, err := tx.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `SELECT pg_sleep($1)`, hold.Seconds()); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
