package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/batch"
)

// A use the gate took in Redis ends in one of two ways, decided by one party:
// its row commits, or the use is given back once its write can no longer
// commit. When the proxy cannot learn what happened to an admission (the
// reserve script's reply was lost: a timeout, a cut connection, while the
// script may have run; or an admitted write's answer was lost: the ledger
// died or the connection broke mid-request), it hands the orders to the
// ledger (httpx.UnsettledPath), which settles them after HANGING_GRACE: a row
// that holds one keeps it held, the others get their uses back. Left alone,
// they would hold their uses until the reconciler's HANGING_GRACE, or for
// ever with the reconciler off.

// handOverFor bounds how long the proxy keeps trying to hand orders over
// while the ledger does not answer; past it they are left to the reconciler
// (and logged).
const handOverFor = 2 * time.Minute

// handOverRetry is the pause between two tries.
const handOverRetry = 250 * time.Millisecond

// HandOver batches orders per voucher into the ledger's unsettled route, with
// retries: one request in flight per voucher, what queued meanwhile goes in
// the next (shared/batch).
type HandOver struct {
	ledger  *Client
	log     *slog.Logger
	base    context.Context
	batcher *batch.Batcher[string, string, struct{}]
	record  func(ctx context.Context, code string, orderIDs []string) error // RecordWith; nil: none
}

// RecordWith has Give record the orders first with record (the gate's park:
// every ledger's reconciler leaves them to a settler, and any ledger's settler
// adopts them), so that a hand-over that cannot reach this proxy's ledger
// (stopped, dead, restarting) within the reconciler's grace is not settled by
// the reconciler as a hanging admission. A failure is logged; the request to
// the ledger goes on.
func (h *HandOver) RecordWith(record func(ctx context.Context, code string, orderIDs []string) error) {
	h.record = record
}

// NewHandOver returns a hand-over to ledger, whose batches run under base
// (the service's lifetime).
func NewHandOver(base context.Context, ledger *Client, log *slog.Logger) *HandOver {
	h := &HandOver{ledger: ledger, log: log, base: base}
	h.batcher = batch.New(base, api.MaxBatchClaims, h.send)
	return h
}

// Give hands orderIDs of code over in the background.
func (h *HandOver) Give(code string, orderIDs ...string) {
	if len(orderIDs) == 0 {
		return
	}
	go func() {
		if h.record != nil {
			if err := h.record(h.base, code, orderIDs); err != nil {
				h.log.Warn("unsettled admissions not recorded as parked in redis", "code", code, "orders", len(orderIDs),
					"err", fmt.Errorf("handed over to the ledger only: %w", err))
			}
		}
		h.batcher.DoAll(h.base, code, orderIDs)
	}()
}

// send delivers one batch, trying again while the ledger does not take it.
func (h *HandOver) send(ctx context.Context, code string, orderIDs []string) ([]struct{}, error) {
	ctx, cancel := context.WithTimeout(ctx, handOverFor)
	defer cancel()
	var last error
	for {
		rep, err := h.ledger.Do(ctx, "unsettled", http.MethodPost, api.Fill(api.RouteUnsettled, code),
			api.UnsettledBody{OrderIDs: orderIDs})
		switch {
		case err == nil && rep.Status == http.StatusNoContent:
			return make([]struct{}, len(orderIDs)), nil
		case err == nil:
			last = fmt.Errorf("ledger answered %d: %w", rep.Status, rep.Err)
		default:
			last = err
		}
		select {
		case <-ctx.Done():
			h.log.Error("hand unsettled admissions over to the ledger", "code", code, "orders", len(orderIDs),
				"err", fmt.Errorf("left for the reconciler: %w", last))
			return make([]struct{}, len(orderIDs)), nil
		case <-time.After(handOverRetry):
		}
	}
}

// NeverSent reports whether a call failed before anything was sent: its
// circuit breaker refused it, no connection could be made, or its deadline
// passed while it was still queued for a batch.
func NeverSent(err error) bool {
	var op *net.OpError
	return errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) ||
		errors.Is(err, batch.ErrDropped) || (errors.As(err, &op) && op.Op == "dial")
}
