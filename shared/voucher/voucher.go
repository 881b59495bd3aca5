// Package voucher holds flashgate's domain: vouchers, reservations, their
// validation and eligibility rules, and the error codes both services answer with.
package voucher

import (
	"strings"
	"time"
)

// Status is the state of a reservation (a row of voucher_redemption).
type Status string

// The reservation states. RESERVED and CONFIRMED hold a use; RELEASED (an
// order cancelled or a hold expired) and REFUNDED (a confirmed order paid back)
// gave it back.
const (
	Reserved  Status = "RESERVED"
	Confirmed Status = "CONFIRMED"
	Released  Status = "RELEASED"
	Refunded  Status = "REFUNDED"
)

// ValidStatus reports whether s names a reservation state.
func ValidStatus(s Status) bool {
	return s == Reserved || s == Confirmed || s == Released || s == Refunded
}

// Why a reservation gave its use back (voucher_redemption.release_reason).
const (
	ReasonCancelled   = "CANCELLED" // DELETE: final, a later confirm is refused
	ReasonExpiredHold = "EXPIRED"   // the sweeper: a late payment may re-acquire
	ReasonRefunded    = "REFUNDED"  // a refund of a confirmed reservation
)

// A voucher's state by the database clock, as the admin view and list show it.
const (
	StateScheduled = "scheduled" // before startsAt
	StateLive      = "live"      // in its window and not paused
	StatePaused    = "paused"    // in or before its window, paused
	StateEnded     = "ended"     // at or after endsAt, paused or not
)

// ValidState reports whether s names a voucher state.
func ValidState(s string) bool {
	return s == StateScheduled || s == StateLive || s == StatePaused || s == StateEnded
}

// Active reports whether a reservation in this state holds a use.
func (s Status) Active() bool { return s == Reserved || s == Confirmed }

// Limits on what a voucher may be created with; generous, but bounded so that no
// arithmetic on them can overflow.
const (
	MaxAmount       = int64(1) << 50
	MaxTotalLimit   = 100_000_000
	MaxPerUserLimit = 1_000
)

// ValidCode reports whether code may name a voucher. Codes become part of Redis
// keys ("voucher:{CODE}:..."), so braces, colons and spaces are never allowed.
// It is ^[A-Za-z0-9_-]{1,32}$, checked byte by byte: every request checks it,
// and a regexp engine costs more than the rest of a sold-out answer.
func ValidCode(code string) bool { return matches(code, 32, false) }

// ValidOrderID reports whether id may name an order. An id made only of dots
// ("." or "..") matches the pattern but is refused: clients that normalise
// paths could never confirm or release it.
func ValidOrderID(id string) bool {
	return matches(id, 64, true) && strings.Trim(id, ".") != ""
}

// matches reports whether s is 1 to max bytes of [A-Za-z0-9_-], and of '.'
// and ':' too when orderID: ^[A-Za-z0-9_-]{1,max}$ or ^[A-Za-z0-9_.:-]{1,max}$.
func matches(s string, max int, orderID bool) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		case orderID && (c == '.' || c == ':'):
		default:
			return false
		}
	}
	return true
}

// Voucher is a voucher with its counters as the ledger reports them.
type Voucher struct {
	Code string `json:"code"`
	Terms
	State          string `json:"state"` // by the database clock; see StateAt
	UsedCount      int    `json:"usedCount"`
	ReservedCount  int    `json:"reservedCount"`
	ConfirmedCount int    `json:"confirmedCount"`
	RefundedCount  int    `json:"refundedCount"`
	Remaining      int    `json:"remaining"`
}

// Terms are what a voucher's creator sets and an operator may change (all but
// flashSale): a Voucher's, and what the audit trail and the voucher events
// keep of one before and after a change (the ledger's store.TermsOf).
type Terms struct {
	DiscountAmount int64     `json:"discountAmount"`
	MinOrderAmount int64     `json:"minOrderAmount"`
	TotalLimit     int       `json:"totalLimit"`
	PerUserLimit   int       `json:"perUserLimit"`
	StartsAt       time.Time `json:"startsAt"`
	EndsAt         time.Time `json:"endsAt"`
	FlashSale      bool      `json:"flashSale"`
	Paused         bool      `json:"paused"`
	// RequireCheckoutToken refuses a reserve without a valid signed checkout
	// token (shared/checkout), checked by the proxy before anything else.
	RequireCheckoutToken bool `json:"requireCheckoutToken"`
	// HoldTTL is how long this voucher's new reservations hold their use;
	// zero: the ledger's RESERVATION_TTL. Answered as "holdTtl": "3m0s" when set.
	HoldTTL Duration `json:"holdTtl,omitempty"`
	// WritePath is how an admitted reservation reaches Postgres: WritePathSync
	// (the group commit answers the request) or WritePathLog (a flash voucher
	// only: the admission is produced to Kafka and a consumer writes it). A
	// voucher always has one; the audit trail leaves out sync, the default.
	WritePath string `json:"writePath,omitempty"`
}

// StateAt is the voucher's state at now: ended from endsAt on, else paused
// while paused, else scheduled before startsAt, else live.
func (v Voucher) StateAt(now time.Time) string {
	switch {
	case !now.Before(v.EndsAt):
		return StateEnded
	case v.Paused:
		return StatePaused
	case now.Before(v.StartsAt):
		return StateScheduled
	}
	return StateLive
}

// DiscountFor is the discount a reservation of orderAmount is answered with:
// the voucher's discount, never more than the order itself.
func (v Voucher) DiscountFor(orderAmount int64) int64 {
	return min(v.DiscountAmount, max(orderAmount, 0))
}

// Eligible checks the rules that do not depend on stock, in the order every
// service and the gate apply them: paused, the validity window
// [StartsAt, EndsAt), the minimum order amount.
func (v Voucher) Eligible(now time.Time, orderAmount int64) error {
	switch {
	case v.Paused:
		return ErrPaused
	case now.Before(v.StartsAt):
		return ErrNotStarted
	case !now.Before(v.EndsAt):
		return ErrExpired
	case orderAmount < v.MinOrderAmount:
		return ErrOrderTooSmall
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

	RequireCheckoutToken *bool   `json:"requireCheckoutToken"`
	HoldTTL              *string `json:"holdTtl"`   // a Go duration, at least MinHoldTTL
	WritePath            *string `json:"writePath"` // WritePathSync (default) or WritePathLog
}

// Validate checks the request and returns the voucher it describes, with defaults
// applied (minOrderAmount 0, perUserLimit 1, flashSale false,
// requireCheckoutToken false, no holdTtl: the ledger's RESERVATION_TTL,
// writePath sync).
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
	hold, err := ParseHoldTTL(n.HoldTTL)
	if err != nil {
		return Voucher{}, err
	}
	path, err := ParseWritePath(n.WritePath, WritePathSync)
	if err != nil {
		return Voucher{}, err
	}
	if path == WritePathLog && (n.FlashSale == nil || !*n.FlashSale) {
		return Voucher{}, ErrLogNeedsFlash
	}
	v := Voucher{Code: *n.Code, Terms: Terms{
		DiscountAmount: *n.DiscountAmount,
		TotalLimit:     *n.TotalLimit,
		PerUserLimit:   1,
		StartsAt:       n.StartsAt.UTC(),
		EndsAt:         n.EndsAt.UTC(),
	}}
	if n.MinOrderAmount != nil {
		v.MinOrderAmount = *n.MinOrderAmount
	}
	if n.PerUserLimit != nil {
		v.PerUserLimit = *n.PerUserLimit
	}
	if n.FlashSale != nil {
		v.FlashSale = *n.FlashSale
	}
	if n.RequireCheckoutToken != nil {
		v.RequireCheckoutToken = *n.RequireCheckoutToken
	}
	v.HoldTTL, v.WritePath = hold, path
	v.Remaining = v.TotalLimit
	return v, nil
}

// Claim is a validated request for one use of a voucher by one order.
type Claim struct {
	CustomerID  int64  `json:"customerId"`
	OrderID     string `json:"orderId"`
	OrderAmount int64  `json:"orderAmount"`
}

// Reservation is one order's hold on a use of a voucher. api.Reservation is
// what GET answers of it; Record adds what the admin listing and export show.
type Reservation struct {
	OrderID        string    `json:"orderId"`
	CustomerID     int64     `json:"customerId"`
	VoucherCode    string    `json:"-"`
	Status         Status    `json:"status"`
	DiscountAmount int64     `json:"discountAmount"` // what the reserve was answered with
	CreatedAt      time.Time `json:"createdAt"`
	ExpiresAt      time.Time `json:"expiresAt"`

	OrderAmount   *int64     `json:"-"` // nil for rows written before amounts were stored
	ConfirmedAt   *time.Time `json:"-"`
	ReleasedAt    *time.Time `json:"-"`
	ReleaseReason *string    `json:"-"` // ReasonCancelled, ReasonExpiredHold or ReasonRefunded
}

// Same reports whether the reservation was made by this voucher, customer and
// order amount, so that a retry of it is answered as the original was. A row
// without a stored amount (written before amounts were kept) matches any.
func (r Reservation) Same(code string, cl Claim) bool {
	return r.VoucherCode == code && r.CustomerID == cl.CustomerID &&
		(r.OrderAmount == nil || *r.OrderAmount == cl.OrderAmount)
}

// Record is a reservation as GET /admin/vouchers/{code}/reservations lists it.
type Record struct {
	OrderID        string     `json:"orderId"`
	CustomerID     int64      `json:"customerId"`
	Status         Status     `json:"status"`
	OrderAmount    *int64     `json:"orderAmount"`
	DiscountAmount int64      `json:"discountAmount"`
	CreatedAt      time.Time  `json:"createdAt"`
	ExpiresAt      time.Time  `json:"expiresAt"`
	ConfirmedAt    *time.Time `json:"confirmedAt"`
	ReleasedAt     *time.Time `json:"releasedAt"`
	ReleaseReason  *string    `json:"releaseReason"`
}

// Record returns r as the admin listing shows it.
func (r Reservation) Record() Record {
	return Record{
		OrderID: r.OrderID, CustomerID: r.CustomerID, Status: r.Status, OrderAmount: r.OrderAmount,
		DiscountAmount: r.DiscountAmount, CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt,
		ConfirmedAt: r.ConfirmedAt, ReleasedAt: r.ReleasedAt, ReleaseReason: r.ReleaseReason,
	}
}

func invalid(format string, args ...any) *Error {
	return Errorf(CodeInvalidRequest, format, args...)
}
