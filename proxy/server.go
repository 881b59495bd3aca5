package main

import (
	"context"
	"net/http"
	"net/url"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Server is the proxy's HTTP face: the ledger's public routes, with reserve
// answered at the edge wherever it can be.
type Server struct {
	admit   *Admitter
	ledger  *LedgerClient
	token   string // PROXY_TOKEN; empty: the edge is open
	ready   func(context.Context) error
	metrics *httpx.Metrics // nil: no /metrics
}

// Handler returns the gin engine with every route registered.
func (s *Server) Handler() *gin.Engine {
	r := httpx.NewServiceEngine(httpx.Service{Metrics: s.metrics, Token: s.token,
		Ready: func(c *gin.Context) error { return s.ready(c) }})

	r.POST("/vouchers/:code/reservations", s.reserve)
	r.GET("/vouchers/:code/reservations/:orderId", s.forward("get"))
	r.POST("/vouchers/:code/reservations/:orderId/confirm", s.forward("confirm"))
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
	s.admit.metrics.outcomes.WithLabelValues(outcome(rep, err)).Inc()
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	relay(c, rep)
}

// outcome names a reserve's result for the metrics: CREATED or an error code.
func outcome(rep Reply, err error) string {
	if err != nil {
		if code := voucher.ErrorCode(err); code != "" {
			return code
		}
		return voucher.CodeUnavailable
	}
	if rep.Status == http.StatusCreated {
		return "CREATED"
	}
	return voucher.ErrorCode(rep.err())
}

// forward relays confirm and get to the ledger after validating the path.
func (s *Server) forward(call string) gin.HandlerFunc {
	return func(c *gin.Context) {
		if _, _, err := httpx.OrderParams(c); err != nil {
			httpx.WriteError(c, err)
			return
		}
		rep, err := s.ledger.Do(c, call, c.Request.Method, c.Request.URL.EscapedPath(), nil)
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
	rep, err := s.ledger.Do(c, "release", http.MethodDelete,
		"/vouchers/"+url.PathEscape(code)+"/reservations/"+url.PathEscape(orderID), nil)
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
