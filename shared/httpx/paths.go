package httpx

import (
	"net/url"

	"github.com/gin-gonic/gin"
)

// ReservationsPath is the path of a voucher's reservations,
// /vouchers/{code}/reservations: POST reserves. Both services serve it, the
// proxy calls the ledger's, and the ledger's internal admitted-write routes
// are it under InternalPrefix.
func ReservationsPath(code string) string {
	return "/vouchers/" + url.PathEscape(code) + "/reservations"
}

// ReservationPath is the path of one order's reservation,
// /vouchers/{code}/reservations/{orderId}: GET reads it, DELETE releases it,
// and /confirm below it confirms it.
func ReservationPath(code, orderID string) string {
	return ReservationsPath(code) + "/" + url.PathEscape(orderID)
}

// SetLocation sets a 201's Location to the new reservation's path (relative to
// the service that answered, where GET reads it).
func SetLocation(c *gin.Context, code, orderID string) {
	c.Header("Location", ReservationPath(code, orderID))
}

// InternalPrefix puts a route among the ledger's internal ones (the proxy's
// admitted writes).
const InternalPrefix = "/internal"

// The ledger's batch admitted-write route takes at most MaxBatchClaims claims
// in a body of at most MaxBatchBytes (openapi.yaml's maxItems): 512 claims
// with 64-byte orderIds fit. Senders keep their batches within both.
const (
	MaxBatchClaims = 512
	MaxBatchBytes  = 128 << 10
)

// UnsettledPath is the ledger's internal route, under InternalPrefix, that
// takes the orders of a voucher whose admission's fate the proxy could not
// learn (a reserve script's reply lost, an admitted write's answer lost): the
// ledger gives back their Redis uses once no write of them can still commit,
// unless a row holds them.
func UnsettledPath(code string) string {
	return InternalPrefix + "/vouchers/" + url.PathEscape(code) + "/unsettled"
}

// UnsettledBody is UnsettledPath's body: 1 to MaxBatchClaims orderIds.
type UnsettledBody struct {
	OrderIDs []string `json:"orderIds"`
}
