package voucher

import (
	"errors"
	"fmt"
)

// Error codes are part of the public API: order services and payment callbacks
// branch on them, so they never change once published.
const (
	CodeInvalidRequest      = "INVALID_REQUEST"
	CodeUnauthorized        = "UNAUTHORIZED"
	CodeForbidden           = "FORBIDDEN" // a known token without the scope the route needs
	CodeVoucherExists       = "VOUCHER_EXISTS"
	CodeVoucherNotFound     = "VOUCHER_NOT_FOUND"
	CodeOutOfStock          = "OUT_OF_STOCK"
	CodeAlreadyUsed         = "ALREADY_USED"
	CodeOrderConflict       = "ORDER_CONFLICT"
	CodeReservationReleased = "RESERVATION_RELEASED"
	CodeNotEligible         = "NOT_ELIGIBLE"
	CodeReservationExpired  = "RESERVATION_EXPIRED"
	CodeReservationNotFound = "RESERVATION_NOT_FOUND"
	CodeAlreadyConfirmed    = "ALREADY_CONFIRMED"
	CodeNotConfirmed        = "NOT_CONFIRMED"
	CodeReservationRefunded = "RESERVATION_REFUNDED"
	CodeLimitBelowUsed      = "LIMIT_BELOW_USED"
	CodeNotFound            = "NOT_FOUND"
	CodeMethodNotAllowed    = "METHOD_NOT_ALLOWED"
	CodeUnavailable         = "UNAVAILABLE"

	// A voucher with requireCheckoutToken: a reserve without X-Checkout-Token,
	// one whose token does not verify (bad signature, expired, minted for
	// another voucher or customer, unknown key id), and a proxy that has no
	// CHECKOUT_TOKEN_SECRET to verify with. All three are 403: retrying the
	// same request cannot succeed.
	CodeCheckoutTokenRequired     = "CHECKOUT_TOKEN_REQUIRED"
	CodeCheckoutTokenInvalid      = "CHECKOUT_TOKEN_INVALID"
	CodeCheckoutTokenUnconfigured = "CHECKOUT_TOKEN_UNCONFIGURED"
	// CodeRateLimited (429) refuses a reserve over its client's or its
	// customer's rate (CLIENT_RATE, CUSTOMER_RATE), or one sent again before
	// the Retry-After it was given: nothing was decided, retry after Retry-After.
	CodeRateLimited = "RATE_LIMITED"
	// CodeWritePathLive (409) refuses a change of writePath while the
	// voucher is live: pause it first.
	CodeWritePathLive = "WRITE_PATH_LIVE"
)

// Reasons given with NOT_ELIGIBLE.
const (
	ReasonNotStarted    = "NOT_STARTED"
	ReasonExpired       = "EXPIRED"
	ReasonOrderTooSmall = "ORDER_TOO_SMALL"
	ReasonPaused        = "PAUSED"
)

// Error is the one error type that crosses package boundaries with a code a
// client can act on. Message is safe to show to the caller; internal details
// stay in the logs.
type Error struct {
	Code    string
	Message string
	Reason  string // only with NOT_ELIGIBLE
}

func (e *Error) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("%s (%s): %s", e.Code, e.Reason, e.Message)
	}
	return e.Code + ": " + e.Message
}

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// NotEligible returns the NOT_ELIGIBLE error for a reason.
func NotEligible(reason, message string) *Error {
	return &Error{Code: CodeNotEligible, Reason: reason, Message: message}
}

// ErrorCode returns the code of the *Error in err's chain, or "" if there is none.
func ErrorCode(err error) string {
	switch e := err.(type) { // the common cases, without errors.As's allocation
	case nil:
		return ""
	case *Error:
		return e.Code
	}
	return wrappedCode(err)
}

func wrappedCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// The NOT_ELIGIBLE answers, one per reason, worded the same by every service
// and by the Redis gate.
var (
	ErrNotStarted    = NotEligible(ReasonNotStarted, "the voucher is not valid yet")
	ErrExpired       = NotEligible(ReasonExpired, "the voucher has expired")
	ErrOrderTooSmall = NotEligible(ReasonOrderTooSmall, "the order amount is below the voucher's minimum")
	ErrPaused        = NotEligible(ReasonPaused, "the voucher is paused")
)

// Common errors, shared so that both services word them the same way.
var (
	ErrOutOfStock          = &Error{Code: CodeOutOfStock, Message: "the voucher has no uses left"}
	ErrAlreadyUsed         = &Error{Code: CodeAlreadyUsed, Message: "the customer has reached the voucher's per-customer limit"}
	ErrOrderConflict       = &Error{Code: CodeOrderConflict, Message: "this orderId is already used with another voucher, customer or order amount"}
	ErrReservationReleased = &Error{Code: CodeReservationReleased, Message: "this orderId's reservation was released: a new order needs a new orderId"}
	ErrReservationExpired  = &Error{Code: CodeReservationExpired, Message: "the reservation expired or was released and no use is left"}
	ErrReservationNotFound = &Error{Code: CodeReservationNotFound, Message: "no reservation with this orderId for this voucher"}
	ErrAlreadyConfirmed    = &Error{Code: CodeAlreadyConfirmed, Message: "the reservation is confirmed and cannot be released"}
	ErrNotConfirmed        = &Error{Code: CodeNotConfirmed, Message: "only a confirmed reservation can be refunded"}
	ErrReservationRefunded = &Error{Code: CodeReservationRefunded, Message: "the reservation was refunded: its use went back to the voucher"}
	ErrLimitBelowUsed      = &Error{Code: CodeLimitBelowUsed, Message: "totalLimit cannot go below the uses held now"}
	ErrVoucherNotFound     = &Error{Code: CodeVoucherNotFound, Message: "no voucher with this code"}
	ErrVoucherExists       = &Error{Code: CodeVoucherExists, Message: "a voucher with this code already exists"}
	ErrUnavailable         = &Error{Code: CodeUnavailable, Message: "temporarily unavailable, retry with the same orderId"}

	ErrCheckoutTokenRequired     = &Error{Code: CodeCheckoutTokenRequired, Message: "this voucher is reserved only with a checkout token (X-Checkout-Token)"}
	ErrCheckoutTokenInvalid      = &Error{Code: CodeCheckoutTokenInvalid, Message: "the checkout token is not valid for this voucher and customer, or has expired"}
	ErrCheckoutTokenUnconfigured = &Error{Code: CodeCheckoutTokenUnconfigured, Message: "this voucher requires a checkout token, which this service cannot verify"}
)

// IsFault reports whether err is a fault (answered 503, to be retried with the
// same orderId) rather than a refusal a client acts on: an error without an
// *Error in its chain (a timeout, a broken connection), or one whose code is
// UNAVAILABLE (a fault wrapped the documented way, with %w on ErrUnavailable).
// nil is neither.
func IsFault(err error) bool {
	if err == nil {
		return false
	}
	code := ErrorCode(err)
	return code == "" || code == CodeUnavailable
}
