// Package web is the ledger's HTTP face: the public reservation routes, the
// internal routes the proxy writes through, the admin routes (vouchers,
// listings with their one cursor codec, the CSV export, the audit trail, the
// events feed). Handlers bind and validate, call one method, write the result.
package web

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/ledger/internal/jobs"
	"github.com/flashgate/flashgate/ledger/internal/sale"
	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/envconf"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/httpx/decode"
	"github.com/flashgate/flashgate/shared/httpx/service"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Server is the ledger's HTTP face: admin routes, the public reservation routes
// the proxy serves too, and the internal route for admitted writes.
type Server struct {
	Log      *slog.Logger // faults answered 503; nil: not logged
	Ledger   *sale.Ledger
	Operator *sale.Operator // the admin routes' changes
	Store    *store.Store   // the admin routes' reads: listings, export, audit, events
	Jobs     *jobs.Jobs     // nil in tests that do not run the background jobs
	Ready    func(*gin.Context) error
	Token    string                        // LEDGER_TOKEN, named "default", with every scope
	Tokens   map[string]envconf.Credential // LEDGER_TOKENS: named tokens with their scopes, beside Token
	Metrics  *httpx.Metrics                // nil: no /metrics
	// MetricsElsewhere leaves /metrics off the main listener (METRICS_ADDR).
	MetricsElsewhere bool

	HangingGrace time.Duration // HANGING_GRACE, served on api.SettingsPath

	// ExportMax bounds the CSV exports streaming at once (EXPORT_MAX): one
	// more is 429 RATE_LIMITED with Retry-After. 0: no bound.
	ExportMax int
	// ExportTimeout ends an export, its transaction with it (EXPORT_TIMEOUT).
	// 0: no deadline beyond the exports' pool's.
	ExportTimeout time.Duration

	MaxInflight int           // MAX_INFLIGHT; 0: InflightCap says
	InflightCap int           // with MaxInflight 0, the adaptive bound's most (MAX_CONNS); both 0: no bound
	LatencySLO  time.Duration // LATENCY_SLO: the excess waits for a slot up to half of it; 0: shed at once
}

// Handler returns the gin engine with every route registered.
func (s *Server) Handler() *gin.Engine {
	r := service.NewEngine(service.Config{Log: s.Log, Metrics: s.Metrics, MetricsElsewhere: s.MetricsElsewhere,
		Token: s.Token, Tokens: s.Tokens, Scopes: scopes, Ready: s.Ready, MaxInflight: s.MaxInflight, InflightCap: s.InflightCap, LatencySLO: s.LatencySLO})

	s.adminRoutes(r)

	r.POST(api.RouteReservations, s.reserve)
	r.GET(api.RouteReservation, s.getReservation)
	r.POST(api.RouteConfirm, s.confirm)
	r.DELETE(api.RouteReservation, s.release)
	r.POST(api.RouteRefund, s.refund)

	r.POST(api.RouteAdmitted, s.writeAdmitted)
	r.POST(api.RouteAdmittedBatch, s.writeAdmittedBatch)
	r.POST(api.RouteUnsettled, s.unsettled)
	r.GET(api.SettingsPath, s.settings)
	r.GET(api.VoucherCodesPath, s.voucherCodes)
	return r
}

// bindClaim reads the voucher code from the path and the claim from the body.
func bindClaim(c *gin.Context) (string, voucher.Claim, error) {
	code, err := decode.CodeParam(c)
	if err != nil {
		return "", voucher.Claim{}, err
	}
	cl, err := decode.BindClaim(c)
	return code, cl, err
}

func (s *Server) reserve(c *gin.Context) {
	code, cl, err := bindClaim(c)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	r, replayed, err := s.Ledger.Reserve(c, code, cl)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	writeReceipt(c, code, r, replayed)
}

// writeReceipt answers a reserve with 201, the reservation's Location and the
// stored discount; a replay says so in api.HeaderReplayed.
func writeReceipt(c *gin.Context, code string, r voucher.Reservation, replayed bool) {
	if replayed {
		c.Header(api.HeaderReplayed, "true")
	}
	httpx.SetLocation(c, code, r.OrderID)
	c.JSON(http.StatusCreated, api.NewReceipt(r))
}

func (s *Server) writeAdmitted(c *gin.Context) {
	code, cl, err := bindClaim(c)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	r, replayed, err := s.Ledger.WriteAdmitted(c, code, cl)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	writeReceipt(c, code, r, replayed)
}

func (s *Server) writeAdmittedBatch(c *gin.Context) {
	code, err := decode.CodeParam(c)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	claims, err := decode.BindClaims(c)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	ws := s.Ledger.WriteAdmittedMany(c, code, claims)
	out := make([]api.ItemReply[any], len(claims))
	for i, w := range ws {
		if w.Err != nil {
			st, body := httpx.AnswerError(c, w.Err) // each claim's fault is logged once, as WriteError would
			out[i] = api.ItemReply[any]{Status: st, Body: body}
			continue
		}
		out[i] = api.ItemReply[any]{Status: http.StatusCreated, Replayed: w.Replayed,
			Body: api.NewReceipt(w.Reservation)}
	}
	c.JSON(http.StatusOK, api.BatchReply[any]{Results: out})
}

// unsettled takes orders whose admission's fate a proxy could not learn
// (httpx.UnsettledPath): the settler gives their Redis uses back once
// HANGING_GRACE has passed and no row holds them.
func (s *Server) unsettled(c *gin.Context) {
	code, err := decode.CodeParam(c)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	ids, err := decode.BindUnsettled(c)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	s.Ledger.Unsettled(code, ids, s.HangingGrace)
	c.Status(http.StatusNoContent)
}

func (s *Server) getReservation(c *gin.Context) {
	code, orderID, err := decode.OrderParams(c)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	r, err := s.Ledger.Reservation(c, code, orderID)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	c.JSON(http.StatusOK, api.NewReservation(r))
}

func (s *Server) confirm(c *gin.Context) {
	code, orderID, err := decode.OrderParams(c)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	r, err := s.Ledger.Confirm(c, code, orderID)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	c.JSON(http.StatusOK, api.NewConfirmation(r))
}

func (s *Server) release(c *gin.Context) {
	code, orderID, err := decode.OrderParams(c)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	if err := s.Ledger.Release(c, code, orderID); err != nil {
		httpx.WriteError(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

func (s *Server) refund(c *gin.Context) {
	code, orderID, err := decode.OrderParams(c)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	r, err := s.Ledger.Refund(c, code, orderID)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	c.JSON(http.StatusOK, api.NewConfirmation(r))
}
