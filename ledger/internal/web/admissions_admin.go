package web

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/ledger/internal/admissions"
	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/httpx/auth"
	"github.com/flashgate/flashgate/shared/httpx/decode"
	"github.com/flashgate/flashgate/shared/voucher"
)

// admissionRoutes registers the routes of the admissions log's dead letters.
func (a *admin) admissionRoutes(r gin.IRoutes) {
	r.GET(api.RouteFailedAdmissions, a.failedAdmissions)
	r.POST(api.RouteAdmissionReplay, a.replayAdmission)
	r.POST(api.RouteAdmissionDiscard, a.discardAdmission)
	r.GET(api.RouteAdmissionsLag, a.admissionsLag)
}

// admissionsLag answers the consumer group's lag as this ledger measures it
// (every ledger measures the whole group).
func (a *admin) admissionsLag(c *gin.Context) {
	lag, known, on := a.ledger.LogLag()
	out := api.AdmissionsLag{Log: on, Known: known}
	if known {
		secs := lag.Seconds()
		out.LagSeconds = &secs
	}
	c.JSON(http.StatusOK, out)
}

// failedAdmissions lists the refused admissions still open, oldest first
// (all=true: the resolved ones too).
func (a *admin) failedAdmissions(c *gin.Context) {
	q, limit, ok := listQuery(c, "all")
	if !ok {
		return
	}
	all := false
	switch q["all"] {
	case "", "false":
	case "true":
		all = true
	default:
		httpx.WriteError(c, voucher.Errorf(voucher.CodeInvalidRequest, "all must be true or false"))
		return
	}
	fs, err := a.store.FailedAdmissions(c, all, limit)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	page := api.FailedAdmissionPage{Admissions: mapped(fs, failedAdmission)}
	if page.Admissions == nil {
		page.Admissions = []api.FailedAdmission{}
	}
	c.JSON(http.StatusOK, page)
}

// replayAdmission reserves a refused admission again, as a reserve of its
// order would (the gate takes a use, then the voucher's write path): once
// the operator removed its cause (raised totalLimit, say). Answered as the
// reserve is; the admission is closed only when that is a 201.
func (a *admin) replayAdmission(c *gin.Context) {
	f, ok := a.openAdmission(c)
	if !ok {
		return
	}
	if f.Reason == admissions.ReasonUnreadable {
		httpx.WriteError(c, voucher.Errorf(voucher.CodeInvalidRequest,
			"a record that is not an admission cannot be replayed: read it in the dead-letter topic, then discard it"))
		return
	}
	r, replayed, err := a.ledger.Reserve(c, f.Code, voucher.Claim{CustomerID: f.CustomerID, OrderID: f.OrderID, OrderAmount: f.OrderAmount})
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	if _, err := a.store.ResolveFailedAdmission(c, f, store.ResolutionReplayed, auth.ActorFrom(c)); err != nil {
		httpx.WriteError(c, err)
		return
	}
	writeReceipt(c, f.Code, r, replayed)
}

// discardAdmission closes a refused admission without reserving it: its use
// was given back when it was refused, so nothing else changes.
func (a *admin) discardAdmission(c *gin.Context) {
	f, ok := a.openAdmission(c)
	if !ok {
		return
	}
	if _, err := a.store.ResolveFailedAdmission(c, f, store.ResolutionDiscarded, auth.ActorFrom(c)); err != nil {
		httpx.WriteError(c, err)
		return
	}
	f, err := a.store.FailedAdmission(c, f.Code, f.OrderID)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	c.JSON(http.StatusOK, failedAdmission(f))
}

// openAdmission reads the route's refused admission; one resolved already
// is a 404, as one never refused.
func (a *admin) openAdmission(c *gin.Context) (store.FailedAdmission, bool) {
	code, orderID, err := decode.OrderParams(c)
	if err != nil {
		httpx.WriteError(c, err)
		return store.FailedAdmission{}, false
	}
	f, err := a.store.FailedAdmission(c, code, orderID)
	if err == nil && f.Resolution != nil {
		err = voucher.Errorf(voucher.CodeNotFound, "the failed admission of order %s for voucher %s was %s already", orderID, code, *f.Resolution)
	}
	if err != nil {
		httpx.WriteError(c, err)
		return store.FailedAdmission{}, false
	}
	return f, true
}
