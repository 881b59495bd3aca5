package systemtest

import (
	"net/http"
	"testing"

	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
)

// The sale-day calls an operator makes on the ledger's admin routes. They
// report a failed exchange or an unexpected status with tb.Errorf (never
// FailNow), so a burst's side goroutine may make them.

// patchVoucher sends PATCH /admin/vouchers/{code} and wants 200.
func (s *stack) patchVoucher(tb testing.TB, code string, patch map[string]any) httpxtest.Reply {
	tb.Helper()
	r := call(tb, http.MethodPatch, s.LedgerURL+"/admin/vouchers/"+code, ledgerToken, patch)
	if r.Status != http.StatusOK {
		tb.Errorf("PATCH /admin/vouchers/%s %v = %d %s, want 200", code, patch, r.Status, r.Raw)
	}
	return r
}

// pauseVoucher sends POST /admin/vouchers/{code}/pause (or /resume when resume
// is set) and wants 200 with the voucher's paused field saying so.
func (s *stack) pauseVoucher(tb testing.TB, code string, resume bool) httpxtest.Reply {
	tb.Helper()
	action := "pause"
	if resume {
		action = "resume"
	}
	r := call(tb, http.MethodPost, s.LedgerURL+"/admin/vouchers/"+code+"/"+action, ledgerToken, nil)
	if r.Status != http.StatusOK || r.Body["paused"] != !resume {
		tb.Errorf("POST /admin/vouchers/%s/%s = %d %s, want 200 with paused %v", code, action, r.Status, r.Raw, !resume)
	}
	return r
}
