// Package edge is the proxy's HTTP face: the ledger's public routes, with a
// reserve answered at the edge wherever it can be (the admitter) and the
// order routes relayed to the ledger, behind the shared service engine
// (tokens and scopes, the per-client limits' guard, the bound on requests in
// flight and what it spares).
package edge

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
	"github.com/flashgate/flashgate/shared/httpx/auth"
	"github.com/flashgate/flashgate/shared/httpx/decode"
	"github.com/flashgate/flashgate/shared/httpx/service"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Server is the proxy's HTTP face: the ledger's public routes, with reserve
// answered at the edge wherever it can be.
type Server struct {
	Log     *slog.Logger                  // faults answered 503; nil: not logged
	Admit   *admit.Admitter               // reserves
	Ledger  *ledger.Client                // the order routes, relayed
	Limits  *limits.Limits                // per-client limits and early retries; nil: none
	Token   string                        // PROXY_TOKEN, every scope
	Tokens  map[string]envconf.Credential // PROXY_TOKENS; with Token empty too: the edge is open (PROXY_AUTH=off)
	Ready   func(context.Context) error   // /readyz: nil while ready
	Metrics *httpx.Metrics                // nil: no /metrics

	MetricsElsewhere bool // METRICS_ADDR: /metrics is on its own listener

	MaxInflight int           // MAX_INFLIGHT; 0: InflightCap says
	InflightCap int           // with MaxInflight 0, the adaptive bound's most (MAX_CONNS); both 0: no bound
	LatencySLO  time.Duration // LATENCY_SLO: the excess waits for a slot up to half of it; 0: shed at once
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
	code, err := decode.CodeParam(c)
	if err != nil {
		return false
	}
	var cl voucher.Claim
	var ok bool
	if st := stateOf(c); st != nil {
		cl, ok = st.cl, st.err == nil
	} else {
		cl, ok = decode.PeekClaim(c)
	}
	return ok && (s.Admit.AdmittedHere(code, cl) || s.Admit.WritingHere(code, cl) || s.Admit.HeldElsewhere(code, cl) ||
		s.Admit.KnownToFlag(code, cl.OrderID))
}

// Handler returns the gin engine with every route registered.
func (s *Server) Handler() *gin.Engine {
	var guard gin.HandlerFunc
	if s.Limits != nil {
		guard = s.guard
	}
	r := service.NewEngine(service.Config{Log: s.Log, Metrics: s.Metrics, MetricsElsewhere: s.MetricsElsewhere, Open: s.OpenPaths(),
		Token: s.Token, Tokens: s.Tokens, Scopes: scopes, Ready: func(c *gin.Context) error { return s.Ready(c) }, MaxInflight: s.MaxInflight, InflightCap: s.InflightCap, LatencySLO: s.LatencySLO,
		Spare: s.spare, Guard: guard})

	r.POST(api.RouteReservations, s.reserve)
	r.GET(api.RouteReservation, s.forward("get", api.RouteReservation, 0))
	r.POST(api.RouteConfirm, s.forward("confirm", api.RouteConfirm, 0))
	r.POST(api.RouteRefund, s.forward("refund", api.RouteRefund, http.StatusOK))
	r.DELETE(api.RouteReservation, s.forward("release", api.RouteReservation, http.StatusNoContent))
	return r
}

// ScopeMetrics lets a token read the proxy's /metrics on its client port
// (with a token required, and no METRICS_ADDR): they tell a voucher's stock
// (flashgate_voucher_remaining), which tells a bot when to strike.
const ScopeMetrics auth.Scope = "metrics"

// OpenPaths are the routes that need no token: /healthz, /readyz and
// /openapi.yaml always; /metrics only when the edge is open (PROXY_AUTH=off).
// With a token required, /metrics on the client port needs one holding the
// scope metrics: set METRICS_ADDR to serve it on a listener of its own,
// without a token, where clients cannot reach it.
func (s *Server) OpenPaths() []string {
	if s.MetricsElsewhere || s.Token == "" && len(s.Tokens) == 0 {
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
var scopes = auth.RouteScopes{
	auth.RouteKey(http.MethodPost, api.RouteReservations):  {auth.ScopeReserve},
	auth.RouteKey(http.MethodGet, api.RouteReservation):    {auth.ScopeReserve},
	auth.RouteKey(http.MethodPost, api.RouteConfirm):       {auth.ScopeSettle},
	auth.RouteKey(http.MethodPost, api.RouteRefund):        {auth.ScopeSettle},
	auth.RouteKey(http.MethodDelete, api.RouteReservation): {auth.ScopeSettle},
	auth.RouteKey(http.MethodGet, api.MetricsPath):         {ScopeMetrics},
}

func (s *Server) reserve(c *gin.Context) {
	code, err := decode.CodeParam(c)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	st := stateOf(c)
	var cl voucher.Claim
	if st != nil {
		cl, err = st.cl, st.err
	} else {
		cl, err = decode.BindClaim(c)
	}
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	var rep ledger.Reply
	if st != nil && st.vetted { // the guard vetted it, then charged the limits
		rep, err = s.Admit.ReserveVetted(c, code, cl, st.v)
	} else {
		rep, err = s.Admit.Reserve(c, code, cl, checkoutToken(c))
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

// forward relays an order's route (get, confirm, refund, release: route is
// its pattern, which the ledger serves too) to the ledger after validating the
// path.
// When the ledger answers givesBack (a release's 204, a refund's 200), a use
// may have come back: this proxy's sold-out flag for the voucher is dropped at
// once (the ledger also publishes the change to every proxy).
func (s *Server) forward(call, route string, givesBack int) gin.HandlerFunc {
	return func(c *gin.Context) {
		code, orderID, err := decode.OrderParams(c)
		if err != nil {
			httpx.WriteError(c, err)
			return
		}
		rep, err := s.Ledger.Do(c, call, c.Request.Method, api.Fill(route, code, orderID), nil)
		if err != nil {
			httpx.WriteError(c, err)
			return
		}
		if givesBack != 0 && rep.Status == givesBack {
			s.Admit.Unflag(code)
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
