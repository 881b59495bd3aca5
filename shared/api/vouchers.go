package api

import "github.com/flashgate/flashgate/shared/voucher"

// The admin routes' voucher bodies: POST RouteVouchers takes a
// voucher.NewVoucher, PATCH RouteVoucher a voucher.VoucherPatch, and both,
// like GET RouteVoucher, pause and resume, answer a voucher.Voucher (domain
// types whose JSON is their wire form).

// VoucherPage is one page of GET RouteVouchers.
type VoucherPage struct {
	Vouchers   []voucher.Voucher `json:"vouchers"`
	NextCursor *string           `json:"nextCursor"` // nil on the last page
}

// RecordPage is one page of GET RouteVoucherReservations: a voucher's
// reservations in creation order.
type RecordPage struct {
	Reservations []voucher.Record `json:"reservations"`
	NextCursor   *string          `json:"nextCursor"` // nil on the last page
}

// WarmupResult is the answer of POST RouteWarmup: Redis holds the voucher.
type WarmupResult struct {
	Code   string `json:"code"`
	Loaded bool   `json:"loaded"` // always true: a voucher that could not be loaded is an error
}
