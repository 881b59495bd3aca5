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
		batch, err := j.store.ExpireBatch(ctx, j.Config.ExpiryBatch)
		if err != nil {
			return total, err
		}
		total += len(batch)
		j.Config.Metrics.expired.Add(float64(len(batch)))
		for _, o := range batch {
			restocked[o.VoucherCode] = true
		}
		j.releaseInRedis(ctx, batch)
		if len(batch) < j.Config.ExpiryBatch {
			return total, nil
		}
	}
}

// releaseInRedis returns the expired flash orders' uses to Redis, one script
// call per voucher. The database has already released them: a failure here only
// leaves Redis holding uses (undersell) until the reconciler frees them.
func (j *Jobs) releaseInRedis(ctx context.Context, batch []store.ExpiredOrder) {
	if j.gate == nil {
		return
	}
	byVoucher := map[string][]string{}
	for _, o := range batch {
		if o.FlashSale {
			byVoucher[o.VoucherCode] = append(byVoucher[o.VoucherCode], o.OrderID)
		}
	}
	for code, orders := range byVoucher {
		if _, err := j.gate.Release(ctx, code, orders...); err != nil {
			j.log.Error("release expired orders in redis", "code", code, "orders", len(orders),
				"err", fmt.Errorf("left for the reconciler: %w", err))
		}
		// A late confirmation may have taken some of them again meanwhile.
		j.settler.Settle(ctx, code, orders...)
	}
}
