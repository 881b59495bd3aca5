package api

import (
	"encoding/json"
	"time"
)

// AuditEvent is one entry of a voucher's audit trail.
type AuditEvent struct {
	At     time.Time       `json:"at"`
	Actor  string          `json:"actor"`
	Action string          `json:"action"`
	Before json.RawMessage `json:"before"` // null when there was nothing before (create)
	After  json.RawMessage `json:"after"`
}

// AuditTrail is the answer of GET RouteAudit: a voucher's audit events,
// oldest first.
type AuditTrail struct {
	Events []AuditEvent `json:"events"`
}
