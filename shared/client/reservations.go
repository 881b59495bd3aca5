package client

import (
	"context"
	"net/http"
	"time"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Receipt is the answer to a reserve: the use is held by the order.
type Receipt struct {
	OrderID        string `json:"orderId"`
	DiscountAmount int64  `json:"discountAmount"`
	Replayed       bool   `json:"-"` // the answer replays the first one to this orderId (Idempotent-Replayed)
	Location       string `json:"-"` // the reservation's path, which Get reads
}

// Reservation is one order's reservation as GET answers it.
type Reservation struct {
	OrderID        string         `json:"orderId"`
	CustomerID     int64          `json:"customerId"`
	Status         voucher.Status `json:"status"`
	DiscountAmount int64          `json:"discountAmount"`
	CreatedAt      time.Time      `json:"createdAt"`
	ExpiresAt      time.Time      `json:"expiresAt"`
}

// Settled is the answer to a confirm (Status CONFIRMED) or a refund
// (Status REFUNDED), with the discount the reservation was answered with.
type Settled struct {
	OrderID        string         `json:"orderId"`
	Status         voucher.Status `json:"status"`
	DiscountAmount int64          `json:"discountAmount"`
}

// Reserve holds one use of voucher code for the order: its errors are
// OUT_OF_STOCK, ALREADY_USED, ORDER_CONFLICT, RESERVATION_RELEASED,
// RESERVATION_REFUNDED, NOT_ELIGIBLE (with a Reason), VOUCHER_NOT_FOUND and
// INVALID_REQUEST. A 503 is retried with the same orderId, which the service
// answers idempotently (a retry of a reserve that was written gets Replayed).
func (c *Client) Reserve(ctx context.Context, code string, claim voucher.Claim) (Receipt, error) {
	var r Receipt
	resp, err := c.do(ctx, http.MethodPost, api.ReservationsPath(code), claim, &r)
	if err != nil {
		return Receipt{}, err
	}
	r.Replayed = resp.Header.Get(api.HeaderReplayed) == "true"
	r.Location = resp.Header.Get(api.HeaderLocation)
	return r, nil
}

// Confirm confirms the order's reservation (the payment arrived). Repeating it
// is harmless. Errors: RESERVATION_EXPIRED, RESERVATION_RELEASED,
// RESERVATION_REFUNDED, RESERVATION_NOT_FOUND.
func (c *Client) Confirm(ctx context.Context, code, orderID string) (Settled, error) {
	var s Settled
	_, err := c.do(ctx, http.MethodPost, api.Fill(api.RouteConfirm, code, orderID), nil, &s)
	return s, err
}

// Release gives the order's use back (the order was cancelled); releasing a
// released or refunded reservation is nil again. Errors: ALREADY_CONFIRMED
// (refund it instead), RESERVATION_NOT_FOUND.
func (c *Client) Release(ctx context.Context, code, orderID string) error {
	_, err := c.do(ctx, http.MethodDelete, api.ReservationPath(code, orderID), nil, nil)
	return err
}

// Refund gives a confirmed order's use back (the order was paid back).
// Repeating it is harmless. Errors: NOT_CONFIRMED, RESERVATION_NOT_FOUND.
func (c *Client) Refund(ctx context.Context, code, orderID string) (Settled, error) {
	var s Settled
	_, err := c.do(ctx, http.MethodPost, api.Fill(api.RouteRefund, code, orderID), nil, &s)
	return s, err
}

// Get reads the order's reservation. Errors: RESERVATION_NOT_FOUND.
func (c *Client) Get(ctx context.Context, code, orderID string) (Reservation, error) {
	var r Reservation
	_, err := c.do(ctx, http.MethodGet, api.ReservationPath(code, orderID), nil, &r)
	return r, err
}
