package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/voucher"
)

// pathSpec is a create body with a write path.
type pathSpec struct {
	voucherSpec
	WritePath string `json:"writePath,omitempty"`
}

// TestWritePath: writePath defaults to sync, log is taken only by a flash
// voucher (on create and PATCH), a value outside sync|log is a 400, and a
// change of it on a live voucher is refused with 409 WRITE_PATH_LIVE while a
// paused one changes (and the audit trail records it).
func TestWritePath(t *testing.T) {
	t.Parallel()
	l := newTestLedger(t, ledgerOptions{})
	create := func(s pathSpec) reply {
		r := l.call(t, http.MethodPost, "/admin/vouchers", s)
		if r.Status == http.StatusCreated && s.FlashSale {
			l.checks.addFlash(s.Code)
		}
		return r
	}

	def := newCode(t)
	assert.Equal(t, voucher.WritePathSync, view(t, create(pathSpec{voucherSpec: spec(def, 10, 1, true)}), http.StatusCreated).WritePath)
	logged := newCode(t)
	assert.Equal(t, voucher.WritePathLog, view(t, create(pathSpec{spec(logged, 10, 1, true), "log"}), http.StatusCreated).WritePath)

	for _, bad := range []pathSpec{{spec(newCode(t), 10, 1, false), "log"}, {spec(newCode(t), 10, 1, true), "kafka"}} {
		r := create(bad)
		assert.Equal(t, http.StatusBadRequest, r.Status, "create %+v: %s", bad, r.Raw)
		assert.Equal(t, voucher.CodeInvalidRequest, r.Code(), "create %+v: %s", bad, r.Raw)
	}
	std := newCode(t)
	l.createVoucher(t, spec(std, 10, 1, false))
	r := l.patch(t, std, map[string]any{"writePath": "log"})
	assert.Equal(t, http.StatusBadRequest, r.Status, "PATCH a standard voucher to log: %s", r.Raw)

	// Live: refused, nothing changes.
	r = l.patch(t, def, map[string]any{"writePath": "log"})
	require.Equal(t, http.StatusConflict, r.Status, "PATCH a live voucher: %s", r.Raw)
	assert.Equal(t, voucher.CodeWritePathLive, r.Code())
	r = l.call(t, http.MethodGet, "/admin/vouchers/"+def, nil)
	assert.Equal(t, voucher.WritePathSync, view(t, r, http.StatusOK).WritePath)
	// A PATCH that keeps the path is no change of it.
	r = l.patch(t, def, map[string]any{"writePath": "sync", "totalLimit": 11})
	assert.Equal(t, voucher.WritePathSync, view(t, r, http.StatusOK).WritePath)

	// Paused: changes, both ways.
	require.Equal(t, http.StatusOK, l.call(t, http.MethodPost, "/admin/vouchers/"+def+"/pause", nil).Status)
	r = l.patch(t, def, map[string]any{"writePath": "log"})
	assert.Equal(t, voucher.WritePathLog, view(t, r, http.StatusOK).WritePath)
	r = l.patch(t, def, map[string]any{"writePath": "sync"})
	assert.Equal(t, voucher.WritePathSync, view(t, r, http.StatusOK).WritePath)
	var logged2 int
	for _, e := range l.auditEvents(t, def) {
		if e.Action == "update" && strings.Contains(string(e.After), `"writePath":"log"`) {
			logged2++
		}
	}
	assert.Equal(t, 1, logged2, "audit updates to writePath log")
}
