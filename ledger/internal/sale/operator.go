package sale

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Operator is the ledger's side of a live sale's controls: create, change,
// pause, resume and warm up a voucher. Postgres decides first, with the audit
// row in the same transaction; then Redis takes the new terms (gate.Update,
// for a flash voucher), every proxy and ledger hears of the change
// (gate.PublishChange), and this ledger forgets its cached terms. A Redis
// failure after the commit is logged, not answered: the change is made, and
// the reconciler rewrites Redis's terms from the database.
type Operator struct {
	store *store.Store
	gate  *gate.Gate     // nil: no Redis (flash vouchers are unavailable anyway)
	pub   gate.Publisher // nil: changes are not announced
	warm  func(ctx context.Context, code string) error
	log   *slog.Logger
}

// NewOperator returns an Operator over store and g (g and pub may be nil);
// warm loads a flash voucher into Redis (Ledger.Warmup).
func NewOperator(st *store.Store, g *gate.Gate, pub gate.Publisher, warm func(ctx context.Context, code string) error,
	log *slog.Logger) *Operator {
	return &Operator{store: st, gate: g, pub: pub, warm: warm, log: log}
}

// announceTimeout bounds the Redis work after a change has committed; it runs
// even when the caller has left.
const announceTimeout = 5 * time.Second

// Create creates a voucher and its audit row; a flash voucher is loaded into
// Redis at once. A failed load is only logged: the voucher exists, and the
// first reserve (or POST .../warmup) loads it. The new code is then published
// like a change: every proxy adds it to the codes it answers for (it answers
// a code it does not know 404 itself) and drops a "not found" it cached.
func (o *Operator) Create(ctx context.Context, v voucher.Voucher, actor string) (voucher.Voucher, error) {
	create := func(ctx context.Context) (err error) {
		if v, err = o.store.CreateVoucher(ctx, v, actor); err != nil {
			return err
		}
		if v.FlashSale {
			if err := o.warm(ctx, v.Code); err != nil {
				o.log.Warn("flash voucher created but not loaded into Redis", "code", v.Code, "err", err)
			}
		}
		return nil
	}
	var err error
	if v.FlashSale {
		// Under the voucher's lock, as a reconcile runs: no reconciler finds
		// the new row before its load and loads it as a finding.
		err = o.store.WithVoucherLock(ctx, v.Code, create)
	} else {
		err = create(ctx)
	}
	if err != nil {
		return v, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), announceTimeout)
	defer cancel()
	PublishChange(ctx, o.pub, v.Code, o.log)
	return v, nil
}

// Change applies a PATCH to a voucher and answers its view. A lower
// totalLimit of a log voucher is taken in Redis first (lowerLogged): only
// Redis counts the uses held by records still in the admissions log.
func (o *Operator) Change(ctx context.Context, code string, p voucher.VoucherPatch, actor string) (voucher.Voucher, error) {
	if p.TotalLimit != nil && o.gate != nil {
		cur, err := o.store.CurrentTerms(ctx, code)
		if err != nil {
			return voucher.Voucher{}, err
		}
		if cur.FlashSale && cur.WritePath == voucher.WritePathLog && *p.TotalLimit < cur.TotalLimit {
			return o.lowerLogged(ctx, code, p, actor)
		}
	}
	return o.change(ctx, code, actor, store.ActionUpdate, p.Apply)
}

// lowerLogged applies a PATCH that lowers a log voucher's totalLimit, under
// the voucher's lock (no reconcile or other lowering between its steps):
// Redis takes the new limit first, in the step admissions take too, and
// refuses it (LIMIT_BELOW_USED, nothing changed) when the uses held there
// (rows, and records the consumer has not written yet) exceed it; then the
// database commits it, and if the database refuses or fails, Redis gets
// the database's terms back. A voucher Redis does not hold is left to the
// database's own check (its next load reads the database).
func (o *Operator) lowerLogged(ctx context.Context, code string, p voucher.VoucherPatch, actor string) (voucher.Voucher, error) {
	var owed bool
	err := o.store.WithVoucherLock(ctx, code, func(ctx context.Context) error {
		loaded, refused, held, err := o.gate.LowerLimit(ctx, code, *p.TotalLimit)
		switch {
		case err != nil:
			return fmt.Errorf("lower the limit of %s in redis: %w: %w", code, err, voucher.ErrUnavailable)
		case refused:
			return voucher.Errorf(voucher.CodeLimitBelowUsed,
				"totalLimit cannot go below the uses held now (%d, admissions still in the log included)", held)
		}
		_, _, _, err = o.store.ChangeVoucher(ctx, code, actor, store.ActionUpdate, p.Apply)
		if err == nil {
			owed = o.termsLocked(ctx, code, true)
		}
		if err != nil && loaded {
			// Undo: the database's terms (the old limit, or whatever a
			// change racing this one committed) go back to Redis.
			bg := context.WithoutCancel(ctx)
			if cur, terr := o.store.CurrentTerms(bg, code); terr != nil {
				o.log.Error("a refused limit stays lowered in redis: the reconciler will restore it", "code", code, "err", terr)
			} else if _, uerr := o.gate.Update(bg, code, cur); uerr != nil {
				o.log.Error("a refused limit stays lowered in redis: the reconciler will restore it", "code", code, "err", uerr)
			}
		}
		return err
	})
	if err != nil {
		return voucher.Voucher{}, err
	}
	o.announce(ctx, code, owed)
	return o.store.Voucher(ctx, code)
}

// SetPaused pauses or resumes a voucher and answers its view. It is
// idempotent: pausing a paused voucher changes nothing and writes no audit row
// (Redis is told again, which heals a change whose Redis step failed).
func (o *Operator) SetPaused(ctx context.Context, code string, paused bool, actor string) (voucher.Voucher, error) {
	action := store.ActionResume
	if paused {
		action = store.ActionPause
	}
	return o.change(ctx, code, actor, action, func(v voucher.Voucher) (voucher.Voucher, error) {
		v.Paused = paused
		return v, nil
	})
}

// change commits a change and gives Redis the new terms under the voucher's
// lock, so that no reconcile runs between the two: it would find the change
// in flight and rewrite Redis's terms as a repair (found by the log VOPR,
// whose reconciler runs every 500 ms). A Redis step that fails is left to
// announce, which tries again.
func (o *Operator) change(ctx context.Context, code, actor, action string,
	change func(voucher.Voucher) (voucher.Voucher, error)) (voucher.Voucher, error) {
	var owed bool
	err := o.store.WithVoucherLock(ctx, code, func(ctx context.Context) error {
		_, after, _, err := o.store.ChangeVoucher(ctx, code, actor, action, change)
		if err == nil {
			owed = o.termsLocked(ctx, code, after.FlashSale)
		}
		return err
	})
	if err != nil {
		return voucher.Voucher{}, err
	}
	o.announce(ctx, code, owed)
	return o.store.Voucher(ctx, code)
}

// termsLocked gives Redis the database's terms of flash voucher code just
// changed, under the voucher's lock. owed reports a Redis step that failed,
// which announce then tries again.
func (o *Operator) termsLocked(ctx context.Context, code string, flash bool) (owed bool) {
	if !flash || o.gate == nil {
		return false
	}
	if err := o.applyTerms(ctx, code); err != nil {
		o.log.Warn("changed terms not yet in redis: tried again", "code", code, "err", err)
		return true
	}
	return false
}

// announce tells every service, and Redis when toRedis (a flash voucher
// whose new terms Redis does not have yet), that code's terms changed. Redis gets
// the terms the database has when the voucher's lock is held (the reconciler's
// too), not the ones this call wrote: two changes racing each other can reach
// Redis in either order, and the last one applied is still the database's.
// A Redis step that failed is tried again in the background until
// announceTimeout (it is idempotent): a change left unapplied in Redis is a
// drift only a reconcile would repair.
func (o *Operator) announce(ctx context.Context, code string, toRedis bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), announceTimeout)
	defer o.store.ForgetTerms(code)
	if toRedis && o.gate != nil {
		if err := o.applyTerms(ctx, code); err != nil {
			go func() {
				defer cancel()
				o.retryTerms(ctx, code, err)
			}()
			PublishChange(ctx, o.pub, code, o.log)
			return
		}
	}
	defer cancel()
	PublishChange(ctx, o.pub, code, o.log)
}

// applyTerms writes the database's current terms of code into Redis, under
// the voucher's lock.
func (o *Operator) applyTerms(ctx context.Context, code string) error {
	return o.store.WithVoucherLock(ctx, code, func(ctx context.Context) error {
		v, err := o.store.CurrentTerms(ctx, code)
		if err != nil {
			return err
		}
		_, err = o.gate.Update(ctx, code, v)
		return err
	})
}

// retryTerms tries applyTerms again every announceRetry until it succeeds or
// ctx ends; a success is announced again (the proxies may have read Redis's
// old terms meanwhile), a final failure logged.
func (o *Operator) retryTerms(ctx context.Context, code string, err error) {
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			continue
		case <-time.After(announceRetry):
		}
		if err = o.applyTerms(ctx, code); err == nil {
			o.store.ForgetTerms(code)
			PublishChange(ctx, o.pub, code, o.log)
			return
		}
	}
	o.log.Error("voucher changed in postgres, not in redis: the reconciler will apply it",
		"code", code, "err", err)
}

// announceRetry is the pause between two tries of a change's Redis step.
const announceRetry = 100 * time.Millisecond

// GateState is what an audit row of a warmup keeps of Redis before and after.
type GateState struct {
	Loaded    bool  `json:"loaded"`
	Remaining int64 `json:"remaining"`
}

// Warmup loads a flash voucher into Redis (Ledger.Warmup: never over a loaded
// one) and writes an audit row with Redis's state before and after.
func (o *Operator) Warmup(ctx context.Context, code, actor string) error {
	if o.gate == nil {
		return ErrNoGate
	}
	before, err := o.gateState(ctx, code)
	if err != nil {
		return err
	}
	if err := o.warm(ctx, code); err != nil {
		return err
	}
	after, err := o.gateState(ctx, code)
	if err != nil {
		return err
	}
	return o.store.AddAudit(ctx, code, actor, store.ActionWarmup, before, after)
}

func (o *Operator) gateState(ctx context.Context, code string) (GateState, error) {
	_, remaining, loaded, err := o.gate.Meta(ctx, code)
	if err != nil {
		return GateState{}, fmt.Errorf("read %s in redis: %w: %w", code, err, voucher.ErrUnavailable)
	}
	return GateState{Loaded: loaded, Remaining: remaining}, nil
}
