package admit

import (
	"context"
	"time"

	"github.com/flashgate/flashgate/shared/voucher"
)

// cachedVoucher is a cache entry; found false caches "no such voucher" briefly
// so that a flood of requests for an unknown code does not reach the ledger.
type cachedVoucher struct {
	v     voucher.Voucher
	found bool
}

// negativeTTL bounds how long an unknown voucher code is remembered.
const negativeTTL = time.Second

// Voucher returns a voucher's terms: VOUCHER_NOT_FOUND for a code outside the
// set of codes, else from the local cache, else from Redis's copy, else from
// the ledger (under LEDGER_LOOKUPS). Concurrent misses for one code share one
// lookup.
func (a *Admitter) Voucher(ctx context.Context, code string) (voucher.Voucher, error) {
	if !a.codes.Has(ctx, code) {
		return voucher.Voucher{}, voucher.ErrVoucherNotFound
	}
	if cv, ok := a.vouchers.Get(code); ok {
		if !cv.found {
			return voucher.Voucher{}, voucher.ErrVoucherNotFound
		}
		return cv.v, nil
	}
	out, err, _ := a.metaFlight.Do(code, func() (any, error) {
		epoch := a.currentEpoch()
		if v, ok := a.metaFromRedis(ctx, code); ok {
			a.cacheVoucher(epoch, code, cachedVoucher{v: v, found: true}, a.cfg.VoucherCacheTTL)
			return v, nil
		}
		v, err := a.lookUp(ctx, code)
		if voucher.ErrorCode(err) == voucher.CodeVoucherNotFound {
			a.cacheVoucher(epoch, code, cachedVoucher{}, min(negativeTTL, a.cfg.VoucherCacheTTL))
			return nil, err
		}
		if err != nil {
			return nil, err
		}
		a.cacheVoucher(epoch, code, cachedVoucher{v: v, found: true}, a.cfg.VoucherCacheTTL)
		return v, nil
	})
	if err != nil {
		return voucher.Voucher{}, err
	}
	return out.(voucher.Voucher), nil
}

// cacheVoucher caches terms read since epoch, unless a change came since.
func (a *Admitter) cacheVoucher(epoch uint64, code string, cv cachedVoucher, ttl time.Duration) {
	a.setIfCurrent(epoch, func() {
		a.vouchers.SetWithTTL(code, cv, 1, ttl)
		a.vouchers.Wait()
	})
}

// metaFromRedis reads the voucher's terms from Redis's copy; any failure just
// sends the caller to the ledger.
func (a *Admitter) metaFromRedis(ctx context.Context, code string) (voucher.Voucher, bool) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.RedisTimeout)
	defer cancel()
	out, err := a.breaker.Execute(func() (any, error) {
		v, _, ok, err := a.gate.Meta(ctx, code)
		if err != nil || !ok {
			return nil, err
		}
		return v, nil
	})
	if err != nil {
		a.metrics.redisErrors.Inc()
		return voucher.Voucher{}, false
	}
	if out == nil {
		return voucher.Voucher{}, false
	}
	return out.(voucher.Voucher), true
}

// logUnverifiable says, once per voucher, that its reserves are refused
// because this proxy has no CHECKOUT_TOKEN_SECRET: an operator's mistake that
// every such reserve would otherwise repeat.
func (a *Admitter) logUnverifiable(code string) {
	if _, seen := a.unverifiable.LoadOrStore(code, true); !seen {
		a.log.Error("voucher requires a checkout token but CHECKOUT_TOKEN_SECRET is not set: its reserves are refused 403 CHECKOUT_TOKEN_UNCONFIGURED",
			"code", code)
	}
}
