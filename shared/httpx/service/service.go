// Package service assembles a service's gin engine from the httpx parts: the
// plumbing (httpx: errors, request ids, metrics, health), auth and overload
// control. It sits above them all, so that they never import one another.
package service

import (
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/envconf"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/httpx/auth"
	"github.com/flashgate/flashgate/shared/httpx/overload"
)

// Config is what both services' engines share beyond httpx.NewEngine's
// defaults: metrics, the request id, bearer auth and the open routes.
type Config struct {
	Log     *slog.Logger                  // where faults and readiness failures are logged
	Metrics *httpx.Metrics                // nil: no /metrics
	Token   string                        // the token named DefaultActor, with every scope; with Tokens empty too: auth off
	Tokens  map[string]envconf.Credential // more tokens by name (LEDGER_TOKENS, PROXY_TOKENS), beside Token
	Scopes  auth.RouteScopes              // the scopes each route takes; a route missing here is refused (403)
	Ready   func(*gin.Context) error      // GET /readyz
	// MetricsElsewhere leaves /metrics off this engine: it is served on its
	// own listener (METRICS_ADDR, httpx.Metrics.ServeMetricsOn).
	MetricsElsewhere bool
	// Open are the paths that need no token; nil: api.OpenPaths. A service
	// that keeps /metrics behind a token leaves it out (and gives GET
	// /metrics its scopes in Scopes).
	Open []string
	// MaxInflight bounds the requests worked on at once (MAX_INFLIGHT); the
	// excess is shed (overload.Shedder). 0: InflightCap says.
	MaxInflight int
	// InflightCap, with MaxInflight 0, has the bound move with what requests
	// take (overload), up to InflightCap (httpx.Serving.InflightCap). Both 0:
	// no bound.
	InflightCap int
	// LatencySLO is LATENCY_SLO: a request over MaxInflight waits for a slot
	// up to half of it while the queue does not stand (overload). 0: the
	// excess is shed at once.
	LatencySLO time.Duration
	// Spare, when set, is asked about a request that finds the bound full:
	// true lets it in (it takes nothing new, say a retry of an order that
	// holds its use). It must be cheap, and may read the body if it puts it
	// back.
	Spare func(*gin.Context) bool
	// Guard, when set, runs on every request after auth (so ClientName is
	// known) and before the shedder: a refusal it writes (a client over its
	// rate, a retry before its Retry-After) takes no slot of MAX_INFLIGHT, and
	// after c.Next it sees every answer, the shedder's 503s included.
	Guard gin.HandlerFunc
}

// NewEngine returns httpx.NewEngine with the metrics middleware and /metrics,
// request ids, auth, the service's guard, the shedder, /healthz, /readyz and
// /openapi.yaml; the service adds its own routes.
func NewEngine(s Config) *gin.Engine {
	r := httpx.NewEngine(s.Log)
	open := s.Open
	if open == nil {
		open = api.OpenPaths
	}
	// A route takes the middleware registered before it: an open /metrics
	// is registered before request ids and auth, one that needs a token
	// after auth.
	metricsOpen := slices.Contains(open, api.MetricsPath)
	if s.Metrics != nil {
		r.Use(s.Metrics.Middleware())
		if !s.MetricsElsewhere && metricsOpen {
			s.Metrics.ServeMetrics(r)
		}
	}
	r.Use(httpx.RequestID())
	// Auth before the shedder: a request without a valid token never takes
	// a slot, and the guard knows the token's name.
	r.Use(auth.Auth(s.tokens(), s.Scopes, open...))
	if s.Metrics != nil && !s.MetricsElsewhere && !metricsOpen {
		s.Metrics.ServeMetrics(r)
	}
	if s.Guard != nil {
		r.Use(s.Guard)
	}
	if s.MaxInflight > 0 || s.InflightCap > 0 {
		var reg prometheus.Registerer
		if s.Metrics != nil {
			reg = s.Metrics.Registry
		}
		r.Use(overload.NewShedder(s.MaxInflight, s.InflightCap, s.LatencySLO, s.Spare, reg).Middleware())
	}
	httpx.Health(r, s.Ready)
	httpx.ServeOpenAPI(r)
	return r
}

// tokens returns the service's tokens by name: Tokens, and Token as
// auth.DefaultActor with every scope.
func (s Config) tokens() map[string]envconf.Credential {
	all := maps.Clone(s.Tokens)
	if s.Token != "" {
		if all == nil {
			all = map[string]envconf.Credential{}
		}
		all[auth.DefaultActor] = envconf.Credential{Token: s.Token}
	}
	return all
}
