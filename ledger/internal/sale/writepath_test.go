package sale_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/shared/voucher"
)

// TestWritePath: writePath defaults to sync, log is taken only by a flash
// voucher (on create and PATCH), a value outside sync|log is a 400, and a
// change of it on a live voucher is refused with 409 WRITE_PATH_LIVE while a
// paused one changes (and the audit trail records it).
func TestWritePath(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	create := func(s ledgertest.PathSpec) ledgertest.Reply {
		r := l.Call(t, http.MethodPost, "/admin/vouchers", s)
		if r.Status == http.StatusCreated && s.FlashSale {
			l.Checks.AddFlash(s.Code)
		}
		return r
	}

	def := ledgertest.NewCode(t)
	assert.Equal(t, voucher.WritePathSync, ledgertest.View(t, create(ledgertest.PathSpec{VoucherSpec: ledgertest.Spec(def, 10, 1, true)}), http.StatusCreated).WritePath)
	logged := ledgertest.NewCode(t)
	assert.Equal(t, voucher.WritePathLog, ledgertest.View(t, create(ledgertest.PathSpec{VoucherSpec: ledgertest.Spec(logged, 10, 1, true), WritePath: "log"}), http.StatusCreated).WritePath)

	for _, bad := range []ledgertest.PathSpec{{VoucherSpec: ledgertest.Spec(ledgertest.NewCode(t), 10, 1, false), WritePath: "log"}, {VoucherSpec: ledgertest.Spec(ledgertest.NewCode(t), 10, 1, true), WritePath: "kafka"}} {
		r := create(bad)
		assert.Equal(t, http.StatusBadRequest, r.Status, "create %+v: %s", bad, r.Raw)
		assert.Equal(t, voucher.CodeInvalidRequest, r.Code(), "create %+v: %s", bad, r.Raw)
	}
	std := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(std, 10, 1, false))
	r := l.Patch(t, std, map[string]any{"writePath": "log"})
	assert.Equal(t, http.StatusBadRequest, r.Status, "PATCH a standard voucher to log: %s", r.Raw)

	// Live: refused, nothing changes.
	r = l.Patch(t, def, map[string]any{"writePath": "log"})
	require.Equal(t, http.StatusConflict, r.Status, "PATCH a live voucher: %s", r.Raw)
	assert.Equal(t, voucher.CodeWritePathLive, r.Code())
	r = l.Call(t, http.MethodGet, "/admin/vouchers/"+def, nil)
	assert.Equal(t, voucher.WritePathSync, ledgertest.View(t, r, http.StatusOK).WritePath)
	// A PATCH that keeps the path is no change of it.
	r = l.Patch(t, def, map[string]any{"writePath": "sync", "totalLimit": 11})
	assert.Equal(t, voucher.WritePathSync, ledgertest.View(t, r, http.StatusOK).WritePath)

	// Paused: changes, both ways.
	require.Equal(t, http.StatusOK, l.Call(t, http.MethodPost, "/admin/vouchers/"+def+"/pause", nil).Status)
	r = l.Patch(t, def, map[string]any{"writePath": "log"})
	assert.Equal(t, voucher.WritePathLog, ledgertest.View(t, r, http.StatusOK).WritePath)
	r = l.Patch(t, def, map[string]any{"writePath": "sync"})
	assert.Equal(t, voucher.WritePathSync, ledgertest.View(t, r, http.StatusOK).WritePath)
	var logged2 int
	for _, e := range l.AuditEvents(t, def) {
		if e.Action == "update" && strings.Contains(string(e.After), `"writePath":"log"`) {
			logged2++
		}
	}
	assert.Equal(t, 1, logged2, "audit updates to writePath log")
}
