package edge

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/httpx/decode"
	"github.com/flashgate/flashgate/shared/voucher"
)

// guard is the gate before the gate (service.Config.Guard), after the bearer
// token's check and before the shedder, so that a refusal takes no slot of
// MAX_INFLIGHT. A reserve is checked before it is charged: its claim valid
// (else the handler answers 400), then vetted (vet: a made-up code
// or a missing checkout token is answered here and charges nothing), then
// charged (limits.Limits.ChargeReserve). Every 503 or 429 a vetted
// reserve gets further on (the shedder, the window, a fault) is remembered
// with its Retry-After for its order and customer. The order routes (get,
// confirm, release, refund) are answered 404 for a code outside the set and
// charged to the client key's bucket before they reach the ledger.
func (s *Server) guard(c *gin.Context) {
	switch c.FullPath() {
	case api.RouteReservations:
		if c.Request.Method == http.MethodPost {
			s.guardReserve(c)
		}
	case api.RouteReservation, api.RouteConfirm, api.RouteRefund:
		s.guardOrder(c)
	}
}

// guardReserve is guard for a reserve.
func (s *Server) guardReserve(c *gin.Context) {
	code, err := decode.CodeParam(c)
	if err != nil {
		return
	}
	cl, err := decode.ReadClaim(c)
	if err != nil {
		c.Set(reserveKey, &reserveState{err: err}) // the handler answers it
		return
	}
	v, err := s.vet(c, code, cl)
	if err != nil { // a made-up code, say: answered here, nothing kept
		httpx.WriteError(c, err)
		c.Abort()
		return
	}
	c.Set(reserveKey, &reserveState{cl: cl, v: v, vetted: true})
	order, ok := s.Limits.ChargeReserve(c, code, cl)
	if !ok {
		return
	}
	c.Next()
	s.Limits.RememberRefusal(c, order)
}

// guardOrder is guard for an order's route: a code outside the set is
// answered 404 here, and the request is charged to its client key.
func (s *Server) guardOrder(c *gin.Context) {
	code, _, err := decode.OrderParams(c)
	if err != nil {
		return // the handler answers the invalid path
	}
	if !s.Admit.Known(c, code) {
		httpx.WriteError(c, voucher.ErrVoucherNotFound)
		c.Abort()
		return
	}
	s.Limits.ChargeClient(c)
}

// reserveState is what the guard learned of a reserve, kept on its
// gin.Context for the shedder's spare and the handler, in one allocation:
// the claim as read (the body is read once), and the voucher terms vet found.
// (The claim kept by decode.PeekClaim and the terms boxed on their own were
// two, on every reserve the edge answers.)
type reserveState struct {
	cl     voucher.Claim
	err    error // the body's refusal, which the handler answers
	v      voucher.Voucher
	vetted bool
}

// reserveKey holds a reserve's *reserveState on its gin.Context.
const reserveKey = "flashgate.reserve"

// stateOf is the guard's reserveState of c, nil when the guard did not read
// c's body (no limits, so no guard).
func stateOf(c *gin.Context) *reserveState {
	if v, ok := c.Get(reserveKey); ok {
		return v.(*reserveState)
	}
	return nil
}

// checkoutTokenField is api.HeaderCheckoutToken as net/http keys it: read
// under this spelling, the header map is used without canonicalizing the
// name on every reserve.
var checkoutTokenField = http.CanonicalHeaderKey(api.HeaderCheckoutToken)

// checkoutToken is the reserve's X-Checkout-Token, "" when none.
func checkoutToken(c *gin.Context) string {
	if v := c.Request.Header[checkoutTokenField]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// vet is Admitter.Vet, with the request's checkout token; a refusal is
// counted as the handler would have.
func (s *Server) vet(c *gin.Context, code string, cl voucher.Claim) (voucher.Voucher, error) {
	v, err := s.Admit.Vet(c, code, cl, checkoutToken(c))
	if err != nil {
		s.Admit.CountRefusal(err)
	}
	return v, err
}
