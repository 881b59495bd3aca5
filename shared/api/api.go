// Package api is flashgate's wire contract, free of any HTTP framework: the
// route patterns and the path builders filled from them, the header names, the
// error body, the ledger's batch and internal bodies and their limits. Both
// services register their routes from these patterns, and the proxy, the Go
// client and the load harness build their URLs from them, so no path or header
// name is written anywhere else.
package api

// Headers flashgate sets or reads.
const (
	// HeaderRequestID carries one request's id from the client through the
	// proxy to the ledger (generated when absent), and back on every answer.
	HeaderRequestID = "X-Request-ID"
	// HeaderReplayed ("true") marks an answer that replays the first answer
	// to the same orderId: no second use was taken.
	HeaderReplayed = "Idempotent-Replayed"
	// HeaderShed ("1") marks a 503 the shedder (MAX_INFLIGHT) gave before any
	// handler ran: the request did nothing.
	HeaderShed = "Flashgate-Shed"
	// HeaderRetryAfter is the standard delay, in seconds, on a 503 or a
	// 429: 1-3 s, drawn per answer (httpx.SetRetryAfter).
	HeaderRetryAfter = "Retry-After"
	// HeaderAuthorization carries "Bearer <token>".
	HeaderAuthorization = "Authorization"
	// HeaderCheckoutToken carries a reserve's signed checkout token
	// (shared/checkout), required by a voucher with requireCheckoutToken.
	HeaderCheckoutToken = "X-Checkout-Token"
	// HeaderLocation is a 201's new reservation path.
	HeaderLocation = "Location"
)

// Bearer is the Authorization value for a token.
func Bearer(token string) string { return "Bearer " + token }

// ErrorBody is the body of every error answer: a code from the voucher
// package's list, a message safe to show, and a reason with NOT_ELIGIBLE.
type ErrorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
	Reason  string `json:"reason,omitempty"`
}
