package jobs

import (
	"context"
	"fmt"

	"github.com/flashgate/flashgate/ledger/internal/sale"
	"github.com/flashgate/flashgate/ledger/internal/store"
)

// Sweep releases every reservation whose hold expired (RELEASED, reason
// EXPIRED: a late payment may still take a use again), in bounded batches, and
// then gives the flash vouchers' uses back in Redis. Each voucher whose stock
// came back is announced once per sweep. It returns how many it released. Two
// ledgers sweeping at once never release a row twice: each batch locks its
// rows with SKIP LOCKED and only RESERVED rows change.
func (j *Jobs) Sweep(ctx context.Context) (int, error) {
	total := 0
	restocked := map[string]bool{}
	defer func() {
		for code := range restocked {
			sale.PublishChange(ctx, j.pub, code, j.log)
		}
	}()
	for {
		due, err := j.store.DueExpired(ctx, j.Config.ExpiryBatch)
		if err != nil || len(due) == 0 {
			return total, err
		}
		batch, err := j.store.ExpireBatch(ctx, due)
		if err != nil {
			// Whether Postgres released them is unknown (a deadline can end
			// the wait after the commit): the settler decides each flash
			// order from the database once the fence has passed, giving its
			// use back in Redis if it was released.
			j.parkFlash(due)
			return total, err
		}
		total += len(batch)
		j.Config.Metrics.expired.Add(float64(len(batch)))
		for _, o := range batch {
			restocked[o.VoucherCode] = true
		}
		j.releaseInRedis(ctx, batch)
		if len(due) < j.Config.ExpiryBatch {
			return total, nil
		}
	}
}

// parkFlash hands the flash orders of a release whose outcome is unknown to
// the settler, per voucher.
func (j *Jobs) parkFlash(orders []store.ExpiredOrder) {
	if j.gate == nil {
		return
	}
	for code, ids := range flashByVoucher(orders) {
		j.settler.Park(code, ids)
	}
}

// flashByVoucher groups the flash orders' ids by voucher.
func flashByVoucher(orders []store.ExpiredOrder) map[string][]string {
	byVoucher := map[string][]string{}
	for _, o := range orders {
		if o.FlashSale {
			byVoucher[o.VoucherCode] = append(byVoucher[o.VoucherCode], o.OrderID)
		}
	}
	return byVoucher
}

// releaseInRedis returns the expired flash orders' uses to Redis, one script
// call per voucher. The database has already released them: a failure here only
// leaves Redis holding uses (undersell) until the reconciler frees them.
func (j *Jobs) releaseInRedis(ctx context.Context, batch []store.ExpiredOrder) {
	if j.gate == nil {
		return
	}
	for code, orders := range flashByVoucher(batch) {
		if _, err := j.gate.Release(ctx, code, orders...); err != nil {
			j.log.Error("release expired orders in redis", "code", code, "orders", len(orders),
				"err", fmt.Errorf("left for the reconciler: %w", err))
		}
		// A late confirmation may have taken some of them again meanwhile.
		j.settler.Settle(ctx, code, orders...)
	}
}
