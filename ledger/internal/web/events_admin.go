package web

import (
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/events"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/voucher"
)

// eventRoutes registers the outbox's admin routes.
func (a *admin) eventRoutes(r gin.IRoutes) {
	r.GET(api.RouteEvents, a.events)
	r.POST(api.RouteEventRetry, a.retryEvent)
}

// events answers the pull feed (events up to the watermark: final, so a
// consumer polling with after never misses one) or, with status, the parked ones.
func (a *admin) events(c *gin.Context) {
	q, limit, ok := listQuery(c, "after", "status")
	if !ok {
		return
	}
	after, err := eventID(q["after"], true)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	if s, ok := q["status"]; ok {
		a.parked(c, s, after, limit)
		return
	}
	wm, err := a.store.Watermark(c)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	evs, err := a.store.Events(c, after, wm, limit)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	c.JSON(http.StatusOK, api.EventPage{Events: evs, NextAfter: nextAfter(evs, after, func(e events.Event) int64 { return e.ID })})
}

// parked answers GET /admin/events?status=failed (or retry).
func (a *admin) parked(c *gin.Context, status string, after int64, limit int) {
	var want string
	switch status {
	case "failed":
		want = "FAILED"
	case "retry":
		want = "RETRY"
	default:
		httpx.WriteError(c, voucher.Errorf(voucher.CodeInvalidRequest, "status must be failed or retry"))
		return
	}
	ps, err := a.store.ParkedEvents(c, "", want, after, limit)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	c.JSON(http.StatusOK, api.ParkedPage{Events: mapped(ps, parkedEvent),
		NextAfter: nextAfter(ps, after, func(p store.Parked) int64 { return p.ID })})
}

// retryEvent asks every sink that parked the event to send it again: the
// delivering ledger does within a moment, after which the failure is gone or,
// failing again, parked anew.
func (a *admin) retryEvent(c *gin.Context) {
	id, err := eventID(c.Param("id"), false)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	ps, err := a.store.RetryEvent(c, id)
	if err != nil {
		httpx.WriteError(c, err)
		return
	}
	c.JSON(http.StatusAccepted, api.Retrying{Retrying: mapped(ps, parkedEvent)})
}

// eventID reads an event id: a positive integer (0 too for after, or absent).
func eventID(s string, after bool) (int64, error) {
	if s == "" && after {
		return 0, nil
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 0 || (id == 0 && !after) || strconv.FormatInt(id, 10) != s {
		return 0, voucher.Errorf(voucher.CodeInvalidRequest, "an event id must be a positive integer (after may be 0)")
	}
	return id, nil
}
