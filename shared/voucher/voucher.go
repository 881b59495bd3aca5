// Package voucher holds flashgate's domain: vouchers, reservations, their
// validation and eligibility rules, and the error codes both services answer with.
package voucher

import (
	"regexp"
	"time"
)

// Status is the state of a reservation (a row of voucher_redemption).
type Status string

// The reservation states. RESERVED and CONFIRMED hold a use; RELEASED gave it back.
const (
	Reserved  Status = "RESERVED"
	Confirmed Status = "CONFIRMED"
	Released  Status = "RELEASED"
)

// Active reports whether a reservation in this state holds a use.
func (s Status) Active() bool { return s == Reserved || s == Confirmed }

// Limits on what a voucher may be created with; generous, but bounded so that no
// arithmetic on them can overflow.
const (
	MaxAmount       = int64(1) << 50
	MaxTotalLimit   = 100_000_000
	MaxPerUserLimit = 1_000
)

var (
	codePattern    = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)
	orderIDPattern = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)
)

// ValidCode reports whether code may name a voucher. Codes become part of Redis
// keys ("voucher:{CODE}:..."), so braces, colons and spaces are never allowed.
func ValidCode(code string) bool { return codePattern.MatchString(code) }

// ValidOrderID reports whether id may name an order.
func ValidOrderID(id string) bool { return orderIDPattern.MatchString(id) }

// Voucher is a voucher with its counters as the ledger reports them.
type Voucher struct {
	Code           string    `json:"code"`
	DiscountAmount int64     `json:"discountAmount"`
	MinOrderAmount int64     `json:"minOrderAmount"`
	TotalLimit     int       `json:"totalLimit"`
	PerUserLimit   int       `json:"perUserLimit"`
	StartsAt       time.Time `json:"startsAt"`
	EndsAt         time.Time `json:"endsAt"`
	FlashSale      bool      `json:"flashSale"`
	UsedCount      int       `json:"usedCount"`
	ReservedCount  int       `json:"reservedCount"`
	ConfirmedCount int       `json:"confirmedCount"`
	Remaining      int       `json:"remaining"`
}

// Eligible checks the rules that do not depend on stock: the validity window
// [StartsAt, EndsAt) and the minimum order amount.
func (v Voucher) Eligible(now time.Time, orderAmount int64) error {
	switch {
	case now.Before(v.StartsAt):
		return NotEligible(ReasonNotStarted, "the voucher is not valid yet")
	case !now.Before(v.EndsAt):
		return NotEligible(ReasonExpired, "the voucher has expired")
	case orderAmount < v.MinOrderAmount:
		return NotEligible(ReasonOrderTooSmall, "the order amount is below the voucher's minimum")
	}
	return nil
}

// NewVoucher is the body of POST /admin/vouchers. Pointers tell a missing field
// from a zero one.
type NewVoucher struct {
	Code           *string    `json:"code"`
	DiscountAmount *int64     `json:"discountAmount"`
	MinOrderAmount *int64     `json:"minOrderAmount"`
	TotalLimit     *int       `json:"totalLimit"`
	PerUserLimit   *int       `json:"perUserLimit"`
	StartsAt       *time.Time `json:"startsAt"`
	EndsAt         *time.Time `json:"endsAt"`
	FlashSale      *bool      `json:"flashSale"`
}

// Validate checks the request and returns the voucher it describes, with defaults
// applied (minOrderAmount 0, perUserLimit 1, flashSale false).
func (n NewVoucher) Validate() (Voucher, error) {
	switch {
	case n.Code == nil:
		return Voucher{}, invalid("code is required")
	case !ValidCode(*n.Code):
		return Voucher{}, invalid("code must match ^[A-Za-z0-9_-]{1,32}$")
	case n.DiscountAmount == nil:
		return Voucher{}, invalid("discountAmount is required")
	case *n.DiscountAmount <= 0 || *n.DiscountAmount > MaxAmount:
		return Voucher{}, invalid("discountAmount must be a positive integer up to %d", MaxAmount)
	case n.MinOrderAmount != nil && (*n.MinOrderAmount < 0 || *n.MinOrderAmount > MaxAmount):
		return Voucher{}, invalid("minOrderAmount must be a non-negative integer up to %d", MaxAmount)
	case n.TotalLimit == nil:
		return Voucher{}, invalid("totalLimit is required")
	case *n.TotalLimit < 0 || *n.TotalLimit > MaxTotalLimit:
		return Voucher{}, invalid("totalLimit must be between 0 and %d", MaxTotalLimit)
	case n.PerUserLimit != nil && (*n.PerUserLimit < 1 || *n.PerUserLimit > MaxPerUserLimit):
		return Voucher{}, invalid("perUserLimit must be between 1 and %d", MaxPerUserLimit)
	case n.StartsAt == nil:
		return Voucher{}, invalid("startsAt is required (RFC 3339)")
	case n.EndsAt == nil:
		return Voucher{}, invalid("endsAt is required (RFC 3339)")
	case n.StartsAt.UTC().Year() < 1 || n.EndsAt.UTC().Year() > 9999:
		// The voucher is answered in JSON, in UTC, and RFC 3339 years have four digits.
		return Voucher{}, invalid("startsAt and endsAt must be within years 0001 to 9999 in UTC")
	case !n.StartsAt.Before(*n.EndsAt):
		return Voucher{}, invalid("startsAt must be before endsAt")
	}
	v := Voucher{
		Code:           *n.Code,
		DiscountAmount: *n.DiscountAmount,
		TotalLimit:     *n.TotalLimit,
		PerUserLimit:   1,
		StartsAt:       n.StartsAt.UTC(),
		EndsAt:         n.EndsAt.UTC(),
	}
	if n.MinOrderAmount != nil {
		v.MinOrderAmount = *n.MinOrderAmount
	}
	if n.PerUserLimit != nil {
		v.PerUserLimit = *n.PerUserLimit
	}
	if n.FlashSale != nil {
		v.FlashSale = *n.FlashSale
	}
	v.Remaining = v.TotalLimit
	return v, nil
}

// ReserveRequest is the body of POST /vouchers/{code}/reservations.
type ReserveRequest struct {
	CustomerID  *int64  `json:"customerId"`
	OrderID     *string `json:"orderId"`
	OrderAmount *int64  `json:"orderAmount"`
}

// Validate checks the request and returns it as a Claim.
func (r ReserveRequest) Validate() (Claim, error) {
	switch {
	case r.CustomerID == nil:
		return Claim{}, invalid("customerId is required")
	case *r.CustomerID <= 0:
		return Claim{}, invalid("customerId must be a positive integer")
	case r.OrderID == nil:
		return Claim{}, invalid("orderId is required")
	case !ValidOrderID(*r.OrderID):
		return Claim{}, invalid("orderId must match ^[A-Za-z0-9_.:-]{1,64}$")
	case r.OrderAmount == nil:
		return Claim{}, invalid("orderAmount is required")
	case *r.OrderAmount < 0 || *r.OrderAmount > MaxAmount:
		return Claim{}, invalid("orderAmount must be a non-negative integer up to %d", MaxAmount)
	}
	return Claim{CustomerID: *r.CustomerID, OrderID: *r.OrderID, OrderAmount: *r.OrderAmount}, nil
}

// Claim is a validated request for one use of a voucher by one order.
type Claim struct {
	CustomerID  int64  `json:"customerId"`
	OrderID     string `json:"orderId"`
	OrderAmount int64  `json:"orderAmount"`
}

// Reservation is one order's hold on a use of a voucher.
type Reservation struct {
	OrderID        string    `json:"orderId"`
	CustomerID     int64     `json:"customerId"`
	VoucherCode    string    `json:"-"`
	Status         Status    `json:"status"`
	DiscountAmount int64     `json:"discountAmount"`
	CreatedAt      time.Time `json:"createdAt"`
	ExpiresAt      time.Time `json:"expiresAt"`
}

// Same reports whether the reservation was made by this voucher and customer, so
// that a retry of it is answered as the original was.
func (r Reservation) Same(code string, customerID int64) bool {
	return r.VoucherCode == code && r.CustomerID == customerID
}

// Receipt is the 201 body of a successful reserve.
type Receipt struct {
	OrderID        string `json:"orderId"`
	DiscountAmount int64  `json:"discountAmount"`
}

// Confirmation is the 200 body of a successful confirm.
type Confirmation struct {
	OrderID        string `json:"orderId"`
	Status         Status `json:"status"`
	DiscountAmount int64  `json:"discountAmount"`
}

func invalid(format string, args ...any) *Error {
	return Errorf(CodeInvalidRequest, format, args...)
}
