package client

import (
	"context"
	"net/http"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Reserve holds one use of voucher code for the order: its errors are
// OUT_OF_STOCK, ALREADY_USED, ORDER_CONFLICT, RESERVATION_RELEASED,
// RESERVATION_REFUNDED, NOT_ELIGIBLE (with a Reason), VOUCHER_NOT_FOUND and
// INVALID_REQUEST. A 503 is retried with the same orderId, which the service
// answers idempotently (a retry of a reserve that was written gets Replayed).
func (c *Client) Reserve(ctx context.Context, code string, claim voucher.Claim) (api.Receipt, error) {
	var r api.Receipt
	resp, err := c.do(ctx, http.MethodPost, api.ReservationsPath(code), claim, &r)
	if err != nil {
		return api.Receipt{}, err
	}
	r.Replayed = resp.Header.Get(api.HeaderReplayed) == "true"
	r.Location = resp.Header.Get(api.HeaderLocation)
	return r, nil
}

// Confirm confirms the order's reservation (the payment arrived). Repeating it
// is harmless. Errors: RESERVATION_EXPIRED, RESERVATION_RELEASED,
// RESERVATION_REFUNDED, RESERVATION_NOT_FOUND.
func (c *Client) Confirm(ctx context.Context, code, orderID string) (api.Confirmation, error) {
	var s api.Confirmation
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
func (c *Client) Refund(ctx context.Context, code, orderID string) (api.Confirmation, error) {
	var s api.Confirmation
	_, err := c.do(ctx, http.MethodPost, api.Fill(api.RouteRefund, code, orderID), nil, &s)
	return s, err
}

// Get reads the order's reservation. Errors: RESERVATION_NOT_FOUND.
func (c *Client) Get(ctx context.Context, code, orderID string) (api.Reservation, error) {
	var r api.Reservation
	_, err := c.do(ctx, http.MethodGet, api.ReservationPath(code, orderID), nil, &r)
	return r, err
}
