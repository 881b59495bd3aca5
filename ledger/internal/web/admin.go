package web

import (
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/ledger/internal/jobs"
	"github.com/flashgate/flashgate/ledger/internal/sale"
	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/httpx/auth"
	"github.com/flashgate/flashgate/shared/httpx/decode"
	"github.com/flashgate/flashgate/shared/voucher"
)

// admin serves the /admin routes: vouchers and their live-sale controls,
// listings, the export and the audit trail. Every change is made under the
// name of the token that asked (auth.ActorFrom).
type admin struct {
	op      *sale.Operator
	ledger  *sale.Ledger
	store   *store.Store
	jobs    *jobs.Jobs // nil in tests that do not run the background jobs
	log     *slog.Logger
	exports exportBudget
}

// adminRoutes registers the admin routes on r.
func (s *Server) adminRoutes(r gin.IRoutes) {
	a := &admin{op: s.Operator, ledger: s.Ledger, store: s.Store, jobs: s.Jobs, log: s.Log,
		exports: newExportBudget(s.ExportMax, s.ExportTimeout)}
	r.POST(api.RouteVouchers, a.create)
	r.GET(api.RouteVouchers, a.list)
	r.GET(api.RouteVoucher, a.get)
	r.PATCH(api.RouteVoucher, a.patch)
	r.POST(api.RoutePause, func(c *gin.Context) { a.setPaused(c, true) })
	r.POST(api.RouteResume, func(c *gin.Context) { a.setPaused(c, false) })
	r.POST(api.RouteWarmup, a.warmup)
	r.POST(api.RouteReconcile, a.reconcile)
	r.GET(api.RouteVoucherReservations, a.reservations)
	r.GET(api.RouteExport, a.export)
	r.GET(api.RouteAudit, a.audit)
	a.eventRoutes(r)
	a.admissionRoutes(r)
}

func (a *admin) create(c *gin.Context) {
	var req voucher.NewVoucher
	if err := decode.BindJSON(c, &req); err != nil {
		httpx.WriteError(c, err)
		return
	}
	v, err := req.Validate()
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	v, err = a.op.Create(c, v, auth.ActorFrom(c))
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	c.JSON(http.StatusCreated, v)
}

func (a *admin) get(c *gin.Context) {
	code, err := decode.CodeParam(c)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	v, err := a.store.Voucher(c, code)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	c.JSON(http.StatusOK, v)
}

func (a *admin) list(c *gin.Context) {
	q, limit, ok := listQuery(c, "state", "flashSale", "cursor")
	if !ok {
		return
	}
	f, err := voucherFilter(q, limit)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	vs, more, err := a.store.ListVouchers(c, f)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	page := api.VoucherPage{Vouchers: vs}
	if more {
		page.NextCursor = nextCursor(vs[len(vs)-1].Code)
	}
	c.JSON(http.StatusOK, page)
}

func (a *admin) patch(c *gin.Context) {
	code, err := decode.CodeParam(c)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	var p voucher.VoucherPatch
	if err := decode.BindJSON(c, &p); err != nil {
		httpx.WriteError(c, err)
		return
	}
	// What the body alone gets wrong (empty, code, flashSale, a bad value, a
	// window given whole) is answered before the database is asked; the
	// window is checked again against the voucher's own, under its lock.
	if _, err := p.Apply(widestWindow); err != nil {
		httpx.WriteError(c, err)
		return
	}
	v, err := a.op.Change(c, code, p, auth.ActorFrom(c))
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	c.JSON(http.StatusOK, v)
}

func (a *admin) setPaused(c *gin.Context, paused bool) {
	code, err := decode.CodeParam(c)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	v, err := a.op.SetPaused(c, code, paused, auth.ActorFrom(c))
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	c.JSON(http.StatusOK, v)
}

func (a *admin) warmup(c *gin.Context) {
	code, err := decode.CodeParam(c)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	if err := a.op.Warmup(c, code, auth.ActorFrom(c)); err != nil {
		httpx.WriteError(c, err)
		return
	}
	c.JSON(http.StatusOK, api.WarmupResult{Code: code, Loaded: true})
}

func (a *admin) reconcile(c *gin.Context) {
	code, err := decode.CodeParam(c)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	if a.jobs == nil {
		httpx.WriteError(c, voucher.ErrUnavailable)
		return
	}
	rep, err := a.jobs.ReconcileBy(c, code, auth.ActorFrom(c))
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	c.JSON(http.StatusOK, reconcileReport(rep))
}

func (a *admin) reservations(c *gin.Context) {
	code, err := decode.CodeParam(c)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	q, limit, ok := listQuery(c, "status", "customerId", "cursor")
	if !ok {
		return
	}
	f, err := recordFilter(q, limit)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	rs, last, more, err := a.store.Records(c, code, f)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	page := api.RecordPage{Reservations: rs}
	if more {
		page.NextCursor = nextCursor(strconv.FormatInt(last, 10))
	}
	c.JSON(http.StatusOK, page)
}

func (a *admin) export(c *gin.Context) {
	code, err := decode.CodeParam(c)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	if _, err := queryParams(c); err != nil {
		httpx.WriteError(c, err)
		return
	}
	done, err := a.exports.start(c)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	defer done()
	writeExport(c, a.store, code, a.log)
}

func (a *admin) audit(c *gin.Context) {
	code, err := decode.CodeParam(c)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	events, err := a.store.Audit(c, code)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	c.JSON(http.StatusOK, api.AuditTrail{Events: mapped(events, auditEvent)})
}

// widestWindow is a voucher whose window any valid patch fits; a flash one,
// so that writePath log is checked against the voucher itself, under its lock.
var widestWindow = voucher.Voucher{Terms: voucher.Terms{
	FlashSale: true,
	StartsAt:  time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
	EndsAt:    time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
}}
