package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/proxy/internal/admit"
	"github.com/flashgate/flashgate/proxy/internal/ledger"
	"github.com/flashgate/flashgate/proxy/internal/limits"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/envconf"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Server is the proxy's HTTP face: the ledger's public routes, with reserve
// answered at the edge wherever it can be.
type Server struct {
	log     *slog.Logger // faults answered 503; nil: not logged
	admit   *admit.Admitter
	ledger  *ledger.Client
	limits  *limits.Limits                // per-client limits and early retries; nil: none
	token   string                        // PROXY_TOKEN, every scope
	tokens  map[string]envconf.Credential // PROXY_TOKENS; with token empty too: the edge is open (PROXY_AUTH=off)
	ready   func(context.Context) error
	metrics *httpx.Metrics // nil: no /metrics

	metricsElsewhere bool // METRICS_ADDR: /metrics is on its own listener

	maxInflight int           // MAX_INFLIGHT; 0: inflightCap says
	inflightCap int           // with maxInflight 0, the adaptive bound's most (MAX_CONNS); both 0: no bound
	latencySLO  time.Duration // LATENCY_SLO: the excess waits for a slot up to half of it; 0: shed at once
}

// spare lets a reserve through a full bound (MAX_INFLIGHT) when it is a
// retry of a flash order this proxy answered 201 (Admitter.AdmittedHere) or is
// writing (WritingHere), one another proxy's gate call admitted
// (HeldElsewhere), or one the sold-out flag it holds knows (KnownToFlag:
// the order held its use, or had finished, in Redis when the flag was set,
// whichever proxy admitted it): it takes no new use and gets the answer of its
// row, so shedding it would only make a customer who already has the voucher
// try again. A new order of a voucher the proxy holds sold out is not spared: the
// flag knows only the orders Redis held when it was set, and a use that came
// back since may have gone to an order through another proxy, whose retry the
// flag would refuse (the chaos soak's pg-restart round saw it, 2026-12-05).
func (s *Server) spare(c *gin.Context) bool {
	if c.Request.Method != http.MethodPost || c.FullPath() != api.RouteReservations {
		return false
	}
	code, err := httpx.CodeParam(c)
	if err != nil {
		return false
	}
	cl, ok := httpx.PeekClaim(c)
	return ok && (s.admit.AdmittedHere(code, cl) || s.admit.WritingHere(code, cl) || s.admit.HeldElsewhere(code, cl) ||
		s.admit.KnownToFlag(code, cl.OrderID))
}

// Handler returns the gin engine with every route registered.
func (s *Server) Handler() *gin.Engine {
	var guard gin.HandlerFunc
	if s.limits != nil {
		guard = s.limits.Guard(limits.EdgeChecks{Vet: s.vet, Known: s.admit.Known})
	}
	r := httpx.NewServiceEngine(httpx.Service{Log: s.log, Metrics: s.metrics, MetricsElsewhere: s.metricsElsewhere, Open: s.openPaths(),
		Token: s.token, Tokens: s.tokens, Scopes: scopes, Ready: func(c *gin.Context) error { return s.ready(c) }, MaxInflight: s.maxInflight, InflightCap: s.inflightCap, LatencySLO: s.latencySLO,
		Spare: s.spare, Guard: guard})

	r.POST(api.RouteReservations, s.reserve)
	r.GET(api.RouteReservation, s.forward("get", api.RouteReservation, 0))
	r.POST(api.RouteConfirm, s.forward("confirm", api.RouteConfirm, 0))
	r.POST(api.RouteRefund, s.forward("refund", api.RouteRefund, http.StatusOK))
	r.DELETE(api.RouteReservation, s.forward("release", api.RouteReservation, http.StatusNoContent))
	return r
}

// scopeMetrics lets a token read the proxy's /metrics on its client port
// (with a token required, and no METRICS_ADDR): they tell a voucher's stock
// (flashgate_voucher_remaining), which tells a bot when to strike.
const scopeMetrics httpx.Scope = "metrics"

// openPaths are the routes that need no token: /healthz, /readyz and
// /openapi.yaml always; /metrics only when the edge is open (PROXY_AUTH=off).
// With a token required, /metrics on the client port needs one holding the
// scope metrics: set METRICS_ADDR to serve it on a listener of its own,
// without a token, where clients cannot reach it.
func (s *Server) openPaths() []string {
	if s.metricsElsewhere || s.token == "" && len(s.tokens) == 0 {
		return nil // /metrics is not here (404), or every path is open anyway
	}
	var open []string
	for _, p := range api.OpenPaths {
		if p != api.MetricsPath {
			open = append(open, p)
		}
	}
	return open
}

// scopes are the scopes each of the edge's routes takes (PROXY_TOKENS'
// name:token:scope+scope): a shop front holds reserve, a payment service
// settle. The proxy checks them; its own LEDGER_TOKEN (internal) then relays.
var scopes = httpx.RouteScopes{
	httpx.RouteKey(http.MethodPost, api.RouteReservations):  {httpx.ScopeReserve},
	httpx.RouteKey(http.MethodGet, api.RouteReservation):    {httpx.ScopeReserve},
	httpx.RouteKey(http.MethodPost, api.RouteConfirm):       {httpx.ScopeSettle},
	httpx.RouteKey(http.MethodPost, api.RouteRefund):        {httpx.ScopeSettle},
	httpx.RouteKey(http.MethodDelete, api.RouteReservation): {httpx.ScopeSettle},
	httpx.RouteKey(http.MethodGet, api.MetricsPath):         {scopeMetrics},
}

func (s *Server) reserve(c *gin.Context) {
	code, err := httpx.CodeParam(c)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	cl, err := httpx.BindClaim(c)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	var rep ledger.Reply
	if v, ok := c.Get(vettedKey); ok { // the guard vetted it, then charged the limits
		rep, err = s.admit.ReserveVetted(c, code, cl, v.(voucher.Voucher))
	} else {
		rep, err = s.admit.Reserve(c, code, cl, c.GetHeader(api.HeaderCheckoutToken))
	}
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	if rep.Status == http.StatusCreated {
		httpx.SetLocation(c, code, cl.OrderID)
	}
	relay(c, rep)
}

// vettedKey holds on a reserve's gin.Context the voucher terms the guard's
// vet found, for the handler.
const vettedKey = "flashgate.vetted"

// vet is the limits' EdgeChecks.Vet: Admitter.Vet, with the request's
// checkout token; a refusal is counted as the handler would have.
func (s *Server) vet(c *gin.Context, code string, cl voucher.Claim) error {
	v, err := s.admit.Vet(c, code, cl, c.GetHeader(api.HeaderCheckoutToken))
	if err != nil {
		s.admit.CountRefusal(err)
		return err
	}
	c.Set(vettedKey, v)
	return nil
}

// forward relays an order's route (get, confirm, refund, release: route is
// its pattern, which the ledger serves too) to the ledger after validating the
// path.
// When the ledger answers givesBack (a release's 204, a refund's 200), a use
// may have come back: this proxy's sold-out flag for the voucher is dropped at
// once (the ledger also publishes the change to every proxy).
func (s *Server) forward(call, route string, givesBack int) gin.HandlerFunc {
	return func(c *gin.Context) {
		code, orderID, err := httpx.OrderParams(c)
		if err != nil {
			httpx.WriteError(c, err)
			return
		}
		rep, err := s.ledger.Do(c, call, c.Request.Method, api.Fill(route, code, orderID), nil)
		if err != nil {
			httpx.WriteError(c, err)
			return
		}
		if givesBack != 0 && rep.Status == givesBack {
			s.admit.Unflag(code)
		}
		relay(c, rep)
	}
}

// relay writes the ledger's answer as it is, with its replay mark.
func relay(c *gin.Context, rep ledger.Reply) {
	if rep.Status == http.StatusServiceUnavailable {
		httpx.SetRetryAfter(c, 0)
	}
	if rep.Replayed {
		c.Header(api.HeaderReplayed, "true")
	}
	if len(rep.Body) == 0 {
		c.Status(rep.Status)
		return
	}
	c.Data(rep.Status, "application/json; charset=utf-8", rep.Body)
}
