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
	cl, ok := decode.PeekClaim(c)
	if !ok {
		return
	}
	if err := s.vet(c, code, cl); err != nil {
		httpx.WriteError(c, err)
		c.Abort()
		return
	}
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

// vettedKey holds on a reserve's gin.Context the voucher terms the guard's
// vet found, for the handler.
const vettedKey = "flashgate.vetted"

// vet is Admitter.Vet, with the request's checkout token; a refusal is
// counted as the handler would have.
func (s *Server) vet(c *gin.Context, code string, cl voucher.Claim) error {
	v, err := s.Admit.Vet(c, code, cl, c.GetHeader(api.HeaderCheckoutToken))
	if err != nil {
		s.Admit.CountRefusal(err)
		return err
	}
	c.Set(vettedKey, v)
	return nil
}
