package web

import (
	"github.com/flashgate/flashgate/ledger/internal/jobs"
	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/api"
)

// The store's and the jobs' types are what the ledger keeps and computes; the
// answers are shared/api's, mapped here, so that a column or a field added
// below reaches the wire only when shared/api and openapi.yaml say so.

// mapped maps each of in with to, keeping nil nil (a JSON null stays one).
func mapped[T, U any](in []T, to func(T) U) []U {
	if in == nil {
		return nil
	}
	out := make([]U, len(in))
	for i, v := range in {
		out[i] = to(v)
	}
	return out
}

func parkedEvent(p store.Parked) api.ParkedEvent {
	return api.ParkedEvent{Event: p.Event, Sink: p.Sink, Status: p.Status, Attempts: p.Attempts,
		LastError: p.LastError, FailedAt: p.FailedAt}
}

func auditEvent(e store.AuditEvent) api.AuditEvent {
	return api.AuditEvent{At: e.At, Actor: e.Actor, Action: e.Action, Before: e.Before, After: e.After}
}

func failedAdmission(f store.FailedAdmission) api.FailedAdmission {
	return api.FailedAdmission{Code: f.Code, OrderID: f.OrderID, CustomerID: f.CustomerID, OrderAmount: f.OrderAmount,
		Reason: f.Reason, Message: f.Message, Partition: f.Partition, Offset: f.Offset, AdmittedAt: f.AdmittedAt,
		FailedAt: f.FailedAt, Resolution: f.Resolution, ResolvedAt: f.ResolvedAt, ResolvedBy: f.ResolvedBy, Failures: f.Failures}
}

func reconcileReport(r jobs.Report) api.ReconcileReport {
	return api.ReconcileReport{Code: r.Code, DBRemaining: r.DBRemaining, RedisRemaining: r.RedisRemaining,
		RedisRemainingAfter: r.RedisRemainingAfter, Drift: r.Drift, Released: r.Released, Restored: r.Restored,
		Reloaded: r.Reloaded}
}
