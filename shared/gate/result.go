package gate

import (
	"context"
	"fmt"
	"strconv"

	"github.com/flashgate/flashgate/shared/voucher"
)

// Result is the outcome of reserving one item. The values are the codes
// reserve.lua returns.
type Result int

// Reserve outcomes.
const (
	Reserved      Result = iota + 1 // a use was taken for this order
	Duplicate                       // this order already holds a use (a retry): success
	OutOfStock                      // no use left
	AlreadyUsed                     // the customer holds perUserLimit uses already
	NotLoaded                       // the voucher is not in Redis: warm it up and retry
	OrderConflict                   // the order id holds a use for another customer
	Finished                        // the order gave its use back in the database (released, expired, refunded)
	Paused                          // the voucher is paused
	NotStarted                      // Redis's clock is before startsAt
	Ended                           // Redis's clock is at or after endsAt
	TooSmall                        // the order amount is below minOrderAmount
)

var resultNames = [...]string{
	Reserved:      "RESERVED",
	Duplicate:     "DUPLICATE",
	OutOfStock:    "OUT_OF_STOCK",
	AlreadyUsed:   "ALREADY_USED",
	NotLoaded:     "NOT_LOADED",
	OrderConflict: "ORDER_CONFLICT",
	Finished:      "FINISHED",
	Paused:        "PAUSED",
	NotStarted:    "NOT_STARTED",
	Ended:         "ENDED",
	TooSmall:      "TOO_SMALL",
}

// String returns the result's wire name, such as "OUT_OF_STOCK".
func (r Result) String() string {
	if r >= Reserved && r <= TooSmall {
		return resultNames[r]
	}
	return "Result(" + strconv.Itoa(int(r)) + ")"
}

// Err returns the domain error a result answers with: nil when the order goes on
// to the ledger's admitted write (Reserved; Duplicate for a retry of a held
// order; Finished for an order whose row gave its use back: the ledger answers
// those from the row), the refusal's voucher error, and an unavailable error for
// NotLoaded (a warmup did not take) or an unknown result. It is the one map from
// gate results to answers both services use.
func (r Result) Err() error {
	switch r {
	case Reserved, Duplicate, Finished:
		return nil
	case Paused:
		return voucher.ErrPaused
	case NotStarted:
		return voucher.ErrNotStarted
	case Ended:
		return voucher.ErrExpired
	case TooSmall:
		return voucher.ErrOrderTooSmall
	case OutOfStock:
		return voucher.ErrOutOfStock
	case AlreadyUsed:
		return voucher.ErrAlreadyUsed
	case OrderConflict:
		return voucher.ErrOrderConflict
	}
	return fmt.Errorf("gate answered %s: %w", r, voucher.ErrUnavailable)
}

// AdmitWarm runs admit and, when Redis does not have the voucher (a restart, a
// flush, an eviction), runs warm to load it and admit once more. A second
// NotLoaded is returned as it is; its Err is unavailable.
func AdmitWarm(ctx context.Context, admit func(context.Context) (Result, error), warm func(context.Context) error) (Result, error) {
	res, err := admit(ctx)
	if err != nil || res != NotLoaded {
		return res, err
	}
	if err := warm(ctx); err != nil {
		return 0, err
	}
	return admit(ctx)
}

// Item is one order asking for one use of a voucher. OrderAmount is checked
// against the voucher's minOrderAmount.
type Item struct {
	CustomerID  int64
	OrderID     string
	OrderAmount int64
}
