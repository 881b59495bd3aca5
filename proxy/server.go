package main

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Server is the proxy's HTTP face: the ledger's public routes, with reserve
// answered at the edge wherever it can be.
type Server struct {
	log     *slog.Logger // faults answered 503; nil: not logged
	admit   *Admitter
	ledger  *LedgerClient
	token   string // PROXY_TOKEN; empty: the edge is open
	ready   func(context.Context) error
	metrics *httpx.Metrics // nil: no /metrics
}

// Handler returns the gin engine with every route registered.
func (s *Server) Handler() *gin.Engine {
	r := httpx.NewServiceEngine(httpx.Service{Log: s.log, Metrics: s.metrics, Token: s.token,
		Ready: func(c *gin.Context) error { return s.ready(c) }})

	r.POST("/vouchers/:code/reservations", s.reserve)
	r.GET("/vouchers/:code/reservations/:orderId", s.forward("get", ""))
	r.POST("/vouchers/:code/reservations/:orderId/confirm", s.forward("confirm", "/confirm"))
	r.DELETE("/vouchers/:code/reservations/:orderId", s.release)
	return r
}

func (s *Server) reserve(c *gin.Context) {
	code, err := httpx.CodeParam(c)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	var req voucher.ReserveRequest
	if err := httpx.BindJSON(c, &req); err != nil {
		httpx.WriteError(c, err)
		return
	}
	cl, err := req.Validate()
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	rep, err := s.admit.Reserve(c, code, cl)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	relay(c, rep)
}

// forward relays get and confirm (suffix "/confirm") to the ledger after
// validating the path.
func (s *Server) forward(call, suffix string) gin.HandlerFunc {
	return func(c *gin.Context) {
		code, orderID, err := httpx.OrderParams(c)
		if err != nil {
			httpx.WriteError(c, err)
			return
		}
		rep, err := s.ledger.Do(c, call, c.Request.Method, httpx.ReservationPath(code, orderID)+suffix, nil)
		if err != nil {
			httpx.WriteError(c, err)
			return
		}
		relay(c, rep)
	}
}

// release relays a release; once it went through, this proxy's sold-out flag
// for the voucher is dropped so the use can be taken again at once.
func (s *Server) release(c *gin.Context) {
	code, orderID, err := httpx.OrderParams(c)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	rep, err := s.ledger.Do(c, "release", http.MethodDelete, httpx.ReservationPath(code, orderID), nil)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	if rep.Status == http.StatusNoContent {
		s.admit.Unflag(code)
	}
	relay(c, rep)
}

// relay writes the ledger's answer as it is.
func relay(c *gin.Context, rep Reply) {
	if rep.Status == http.StatusServiceUnavailable {
		c.Header("Retry-After", httpx.RetryAfter)
	}
	if len(rep.Body) == 0 {
		c.Status(rep.Status)
		return
	}
	c.Data(rep.Status, "application/json; charset=utf-8", rep.Body)
}
