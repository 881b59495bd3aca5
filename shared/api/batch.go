package api

import "github.com/flashgate/flashgate/shared/voucher"

// The ledger's batch admitted-write route takes at most MaxBatchClaims claims
// in a body of at most MaxBatchBytes (openapi.yaml's maxItems): 512 claims
// with 64-byte orderIds fit. Senders keep their batches within both.
const (
	MaxBatchClaims = 512
	MaxBatchBytes  = 128 << 10
)

// BatchRequest is RouteAdmittedBatch's body: one reserve body per claim.
type BatchRequest struct {
	Claims []voucher.Claim `json:"claims"`
}

// BatchReply is RouteAdmittedBatch's answer: one ItemReply per claim, in the
// request's order. B is the body's type: what the ledger writes (any), what
// the proxy reads back (json.RawMessage).
type BatchReply[B any] struct {
	Results []ItemReply[B] `json:"results"`
}

// ItemReply is one claim's answer in a batch: the status and body the single
// route would have answered, and Replayed where it would have set
// HeaderReplayed.
type ItemReply[B any] struct {
	Status   int  `json:"status"`
	Body     B    `json:"body"`
	Replayed bool `json:"replayed,omitempty"`
}

// UnsettledBody is RouteUnsettled's body: 1 to MaxBatchClaims orderIds.
type UnsettledBody struct {
	OrderIDs []string `json:"orderIds"`
}
