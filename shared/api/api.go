// Package api is flashgate's wire contract, free of any HTTP framework: the
// route patterns and the path builders filled from them, the header names, and
// every request and answer body of both services, one file per resource
// (reservations, vouchers, events, admissions, reconcile, audit, errors,
// health, the internal routes), beside openapi.yaml, which describes them.
// Both services register their routes from these patterns and answer with
// these types (storage and job types are mapped to them, never served), and
// the Go client, flashgatectl and the load harness read them, so no path,
// header name or body is declared anywhere else. A domain type whose JSON is
// its wire form (voucher.Voucher, voucher.Claim, voucher.Record, events.Event)
// stays in its package and is used here as it is.
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
