package checkout

import (
	"time"

	"github.com/flashgate/flashgate/shared/voucher"
)

// Check answers whether a reserve of v by customerID, carrying token ("" when
// the request had none), may go on: always when v does not require a token;
// CHECKOUT_TOKEN_UNCONFIGURED when it does and there are no keys to verify
// with; CHECKOUT_TOKEN_REQUIRED without a token; CHECKOUT_TOKEN_INVALID when
// Verify refuses it (the cause is wrapped, for the logs, never answered).
func (k Keys) Check(v voucher.Voucher, token string, customerID int64, now time.Time) error {
	switch {
	case !v.RequireCheckoutToken:
		return nil
	case len(k) == 0:
		return voucher.ErrCheckoutTokenUnconfigured
	case token == "":
		return voucher.ErrCheckoutTokenRequired
	}
	if err := k.Verify(token, v.Code, customerID, now); err != nil {
		return voucher.ErrCheckoutTokenInvalid
	}
	return nil
}
