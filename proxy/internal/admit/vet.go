package admit

import (
	"context"
	"time"

	"github.com/flashgate/flashgate/proxy/internal/ledger"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Vet is what a reserve must pass before it may spend anything but its own
// sender's budget: its code is a voucher's (the set of codes, then its terms),
// and the checkout token a voucher requires is valid for its customer (token:
// the request's X-Checkout-Token, "" when none). Only then do the limits
// charge a customer's bucket or remember its order (the edge's guard): a request
// in a customer's name without that customer's token, or for a made-up code,
// spends no one's budget and makes no Redis key. It returns the voucher's
// terms for ReserveVetted.
func (a *Admitter) Vet(ctx context.Context, code string, cl voucher.Claim, token string) (voucher.Voucher, error) {
	v, err := a.Voucher(ctx, code)
	if err != nil {
		return voucher.Voucher{}, err
	}
	// For flash and standard vouchers alike, before anything is taken or
	// written: the gate and the ledger never see a reserve it refused (so
	// neither checks it).
	if err := a.cfg.CheckoutKeys.Check(v, token, cl.CustomerID, time.Now()); err != nil {
		if err == voucher.ErrCheckoutTokenUnconfigured {
			a.logUnverifiable(code)
		}
		return voucher.Voucher{}, err
	}
	return v, nil
}

// Reserve vets a validated claim (Vet) and runs it through the edge
// (ReserveVetted); a refusal of Vet is counted as any other outcome.
func (a *Admitter) Reserve(ctx context.Context, code string, cl voucher.Claim, token string) (ledger.Reply, error) {
	v, err := a.Vet(ctx, code, cl, token)
	if err != nil {
		a.count(ledger.Reply{}, err)
		return ledger.Reply{}, err
	}
	return a.ReserveVetted(ctx, code, cl, v)
}

// CountRefusal counts in flashgate_reserve_total a reserve that Vet refused
// outside Reserve (in the edge's guard).
func (a *Admitter) CountRefusal(err error) { a.count(ledger.Reply{}, err) }
