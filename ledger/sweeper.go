package main

import (
	"context"
	"fmt"
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
			publishChange(ctx, j.pub, code, j.log)
		}
	}()
	for {
		batch, err := j.store.ExpireBatch(ctx, j.cfg.ExpiryBatch)
		if err != nil {
			return total, err
		}
		total += len(batch)
		j.cfg.Metrics.expired.Add(float64(len(batch)))
		for _, o := range batch {
			restocked[o.VoucherCode] = true
		}
		j.releaseInRedis(ctx, batch)
		if len(batch) < j.cfg.ExpiryBatch {
			return total, nil
		}
	}
}

// releaseInRedis returns the expired flash orders' uses to Redis, one script
// call per voucher. The database has already released them: a failure here only
// leaves Redis holding uses (undersell) until the reconciler frees them.
func (j *Jobs) releaseInRedis(ctx context.Context, batch []ExpiredOrder) {
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
