package api

import (
	"time"

	"github.com/flashgate/flashgate/shared/voucher"
)

// ReserveRequest is the body of POST RouteReservations (and of the internal
// admitted write): pointers, so that a missing field is told from a zero.
type ReserveRequest struct {
	CustomerID  *int64  `json:"customerId"`
	OrderID     *string `json:"orderId"`
	OrderAmount *int64  `json:"orderAmount"`
}

// Validate checks the request and returns it as a Claim.
func (r ReserveRequest) Validate() (voucher.Claim, error) {
	invalid := func(format string, args ...any) error {
		return voucher.Errorf(voucher.CodeInvalidRequest, format, args...)
	}
	switch {
	case r.CustomerID == nil:
		return voucher.Claim{}, invalid("customerId is required")
	case *r.CustomerID <= 0:
		return voucher.Claim{}, invalid("customerId must be a positive integer")
	case r.OrderID == nil:
		return voucher.Claim{}, invalid("orderId is required")
	case !voucher.ValidOrderID(*r.OrderID):
		return voucher.Claim{}, invalid("orderId must match ^[A-Za-z0-9_.:-]{1,64}$")
	case r.OrderAmount == nil:
		return voucher.Claim{}, invalid("orderAmount is required")
	case *r.OrderAmount < 0 || *r.OrderAmount > voucher.MaxAmount:
		return voucher.Claim{}, invalid("orderAmount must be a non-negative integer up to %d", voucher.MaxAmount)
	}
	return voucher.Claim{CustomerID: *r.CustomerID, OrderID: *r.OrderID, OrderAmount: *r.OrderAmount}, nil
}

// Receipt is the 201 answer of a reserve (and of a replayed admission).
// Replayed and Location travel in headers (HeaderReplayed, HeaderLocation),
// not in the body: the client fills them from the answer.
type Receipt struct {
	OrderID        string `json:"orderId"`
	DiscountAmount int64  `json:"discountAmount"`
	Replayed       bool   `json:"-"` // the answer replays the first one to this orderId
	Location       string `json:"-"` // the reservation's path, which GET reads
}

// NewReceipt is the receipt of a reservation.
func NewReceipt(r voucher.Reservation) Receipt {
	return Receipt{OrderID: r.OrderID, DiscountAmount: r.DiscountAmount}
}

// Confirmation is the 200 answer of a confirm (status CONFIRMED) and of a
// refund (status REFUNDED).
type Confirmation struct {
	OrderID        string         `json:"orderId"`
	Status         voucher.Status `json:"status"`
	DiscountAmount int64          `json:"discountAmount"`
}

// NewConfirmation is the answer of a confirm or a refund of r.
func NewConfirmation(r voucher.Reservation) Confirmation {
	return Confirmation{OrderID: r.OrderID, Status: r.Status, DiscountAmount: r.DiscountAmount}
}

// Reservation is the answer of GET RouteReservation: one order's hold.
type Reservation struct {
	OrderID        string         `json:"orderId"`
	CustomerID     int64          `json:"customerId"`
	Status         voucher.Status `json:"status"`
	DiscountAmount int64          `json:"discountAmount"` // what the reserve was answered with
	CreatedAt      time.Time      `json:"createdAt"`
	ExpiresAt      time.Time      `json:"expiresAt"`
}

// NewReservation is r as GET answers it.
func NewReservation(r voucher.Reservation) Reservation {
	return Reservation{OrderID: r.OrderID, CustomerID: r.CustomerID, Status: r.Status,
		DiscountAmount: r.DiscountAmount, CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt}
}
