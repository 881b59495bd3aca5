package web

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/flashgate/flashgate/ledger/internal/jobs"
	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/events"
	"github.com/flashgate/flashgate/shared/voucher"
)

// TestWireMappings: each store or job type that the ledger once served as it
// was is now mapped to its shared/api answer, and the answer's JSON is
// byte-for-byte what the type itself wrote, every field set (so a field the
// mapping forgot shows as a zero).
func TestWireMappings(t *testing.T) {
	at := time.Date(2026, 12, 7, 18, 4, 17, 123456000, time.UTC)
	later, resolution, by, amount := at.Add(time.Minute), store.ResolutionDiscarded, "ops", int64(5_000)
	event := events.Event{ID: 42, Type: events.ReservationReleased, OccurredAt: at, VoucherCode: "FLASH",
		Data: json.RawMessage(`{"orderId":"o-1","customerId":7,"discountAmount":100,"reason":"EXPIRED"}`)}
	parked := store.Parked{Event: event, Sink: "webhook:http://x", Status: "FAILED", Attempts: 3, LastError: "500", FailedAt: later}
	audit := store.AuditEvent{At: at, Actor: "ops", Action: "update", Before: json.RawMessage(`{"totalLimit":1}`),
		After: json.RawMessage(`{"totalLimit":2}`)}
	failed := store.FailedAdmission{Code: "FLASH", OrderID: "o-1", CustomerID: 7, OrderAmount: 5_000, Reason: voucher.CodeOutOfStock,
		Message: "sold out", Partition: 2, Offset: 99, AdmittedAt: at, FailedAt: later, Resolution: &resolution,
		ResolvedAt: &later, ResolvedBy: &by, Failures: 2}
	report := jobs.Report{Code: "FLASH", DBRemaining: 1, RedisRemaining: 2, RedisRemainingAfter: 3, Drift: 4,
		Released: 5, Restored: 6, Reloaded: true}
	reservation := voucher.Reservation{OrderID: "o-1", CustomerID: 7, VoucherCode: "FLASH", Status: voucher.Reserved,
		DiscountAmount: 100, CreatedAt: at, ExpiresAt: later, OrderAmount: &amount, ConfirmedAt: &later}

	for _, c := range []struct {
		name     string
		old, new any
	}{
		{"parked event", parked, parkedEvent(parked)},
		{"audit event", audit, auditEvent(audit)},
		{"failed admission", failed, failedAdmission(failed)},
		{"reconcile report", report, reconcileReport(report)},
		{"reservation", reservation, api.NewReservation(reservation)},
		{"receipt", struct { // voucher.Receipt's fields
			OrderID        string `json:"orderId"`
			DiscountAmount int64  `json:"discountAmount"`
		}{"o-1", 100}, api.NewReceipt(reservation)},
		{"warmup", map[string]any{"code": "FLASH", "loaded": true}, api.WarmupResult{Code: "FLASH", Loaded: true}},
		{"retrying", map[string]any{"retrying": []store.Parked{parked}}, api.Retrying{Retrying: mapped([]store.Parked{parked}, parkedEvent)}},
		{"audit trail", map[string]any{"events": []store.AuditEvent{audit}}, api.AuditTrail{Events: mapped([]store.AuditEvent{audit}, auditEvent)}},
		{"no audit", map[string]any{"events": []store.AuditEvent(nil)}, api.AuditTrail{Events: mapped([]store.AuditEvent(nil), auditEvent)}},
		{"health", map[string]any{"status": "ok", "pid": 1234}, api.Health{PID: 1234, Status: "ok"}},
	} {
		old, err := json.Marshal(c.old)
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(c.new)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(old) {
			t.Errorf("%s: the answer writes\n%s\nwhere the served type wrote\n%s", c.name, got, old)
		}
	}
}
