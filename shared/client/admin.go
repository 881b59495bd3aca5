package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/voucher"
)

// The ledger's admin routes (a ledger token): vouchers, their reservations and
// audit trail, and the Redis warmup and reconcile of a flash voucher.

// VoucherQuery filters ListVouchers; zero values filter nothing.
type VoucherQuery struct {
	State     string // scheduled, live, paused or ended
	FlashSale *bool
	Limit     int    // 1..500; 0: the service's default (100)
	Cursor    string // the previous page's NextCursor
}

// RecordQuery filters Reservations; zero values filter nothing.
type RecordQuery struct {
	Status     voucher.Status
	CustomerID int64
	Limit      int
	Cursor     string
}

// CreateVoucher creates a voucher (a flash one is loaded into Redis).
// Errors: VOUCHER_EXISTS, INVALID_REQUEST. A 503 is retried: a retry of a
// create that was written answers VOUCHER_EXISTS.
func (c *Client) CreateVoucher(ctx context.Context, v voucher.NewVoucher) (voucher.Voucher, error) {
	var out voucher.Voucher
	_, err := c.do(ctx, http.MethodPost, api.RouteVouchers, v, &out)
	return out, err
}

// Voucher reads a voucher with its counters. Errors: VOUCHER_NOT_FOUND.
func (c *Client) Voucher(ctx context.Context, code string) (voucher.Voucher, error) {
	var out voucher.Voucher
	_, err := c.do(ctx, http.MethodGet, api.VoucherPath(code), nil, &out)
	return out, err
}

// ListVouchers reads one page of vouchers.
func (c *Client) ListVouchers(ctx context.Context, q VoucherQuery) (api.VoucherPage, error) {
	v := url.Values{}
	if q.State != "" {
		v.Set("state", q.State)
	}
	if q.FlashSale != nil {
		v.Set("flashSale", strconv.FormatBool(*q.FlashSale))
	}
	page(v, q.Limit, q.Cursor)
	var out api.VoucherPage
	_, err := c.do(ctx, http.MethodGet, api.RouteVouchers+query(v), nil, &out)
	return out, err
}

// UpdateVoucher changes the terms the patch sets. Errors: LIMIT_BELOW_USED,
// VOUCHER_NOT_FOUND, INVALID_REQUEST.
func (c *Client) UpdateVoucher(ctx context.Context, code string, p voucher.VoucherPatch) (voucher.Voucher, error) {
	var out voucher.Voucher
	_, err := c.do(ctx, http.MethodPatch, api.VoucherPath(code), p, &out)
	return out, err
}

// Pause stops new reserves of the voucher (confirm, release and refund go on).
func (c *Client) Pause(ctx context.Context, code string) (voucher.Voucher, error) {
	var out voucher.Voucher
	_, err := c.do(ctx, http.MethodPost, api.Fill(api.RoutePause, code), nil, &out)
	return out, err
}

// Resume undoes Pause.
func (c *Client) Resume(ctx context.Context, code string) (voucher.Voucher, error) {
	var out voucher.Voucher
	_, err := c.do(ctx, http.MethodPost, api.Fill(api.RouteResume, code), nil, &out)
	return out, err
}

// Warmup loads a flash voucher into Redis before the sale.
func (c *Client) Warmup(ctx context.Context, code string) error {
	_, err := c.do(ctx, http.MethodPost, api.Fill(api.RouteWarmup, code), nil, nil)
	return err
}

// Reconcile brings a flash voucher's Redis state into agreement with the database now.
func (c *Client) Reconcile(ctx context.Context, code string) (api.ReconcileReport, error) {
	var out api.ReconcileReport
	_, err := c.do(ctx, http.MethodPost, api.Fill(api.RouteReconcile, code), nil, &out)
	return out, err
}

// Reservations reads one page of the voucher's reservations.
func (c *Client) Reservations(ctx context.Context, code string, q RecordQuery) (api.RecordPage, error) {
	v := url.Values{}
	if q.Status != "" {
		v.Set("status", string(q.Status))
	}
	if q.CustomerID != 0 {
		v.Set("customerId", strconv.FormatInt(q.CustomerID, 10))
	}
	page(v, q.Limit, q.Cursor)
	var out api.RecordPage
	_, err := c.do(ctx, http.MethodGet, api.Fill(api.RouteVoucherReservations, code)+query(v), nil, &out)
	return out, err
}

// ExportReservations writes the voucher's reservations as CSV to w.
func (c *Client) ExportReservations(ctx context.Context, code string, w io.Writer) error {
	var csv rawBody
	if _, err := c.do(ctx, http.MethodGet, api.Fill(api.RouteExport, code), nil, &csv); err != nil {
		return err
	}
	_, err := w.Write(csv)
	return err
}

// Audit reads the voucher's audit trail, oldest first.
func (c *Client) Audit(ctx context.Context, code string) ([]api.AuditEvent, error) {
	var out api.AuditTrail
	_, err := c.do(ctx, http.MethodGet, api.Fill(api.RouteAudit, code), nil, &out)
	return out.Events, err
}

func page(v url.Values, limit int, cursor string) {
	if limit != 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		v.Set("cursor", cursor)
	}
}

func query(v url.Values) string {
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}

// rawBody asks do for a body that is not JSON (the CSV export) as it is.
type rawBody []byte
