package api

import "time"

// FailedAdmission is an admission the admissions log's consumer refused: the
// answer of POST RouteAdmissionDiscard, and an entry of
// FailedAdmissionPage.
type FailedAdmission struct {
	Code        string     `json:"code"`
	OrderID     string     `json:"orderId"`
	CustomerID  int64      `json:"customerId"`
	OrderAmount int64      `json:"orderAmount"`
	Reason      string     `json:"reason"` // the refusal's error code, UNREADABLE or REJECTED
	Message     string     `json:"message"`
	Partition   int32      `json:"partition"`
	Offset      int64      `json:"offset"`
	AdmittedAt  time.Time  `json:"admittedAt"`
	FailedAt    time.Time  `json:"failedAt"`
	Resolution  *string    `json:"resolution"` // nil while open; replayed or discarded
	ResolvedAt  *time.Time `json:"resolvedAt"`
	ResolvedBy  *string    `json:"resolvedBy"`
	Failures    int        `json:"failures"` // refusals of the order's admissions (a replay refused again: 2)
}

// FailedAdmissionPage is the answer of GET RouteFailedAdmissions, oldest
// first.
type FailedAdmissionPage struct {
	Admissions []FailedAdmission `json:"admissions"`
}

// AdmissionsLag is RouteAdmissionsLag's answer: the admissions consumer
// group's lag as the ledger's reconciler and settler trust it. Log is false
// on a ledger without an admissions log; LagSeconds is null while the lag is
// not known (no hold of a log voucher is freed then).
type AdmissionsLag struct {
	Log        bool     `json:"log"`
	Known      bool     `json:"known"`
	LagSeconds *float64 `json:"lagSeconds"`
}
