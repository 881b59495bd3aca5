package ledger

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/batch"
	"github.com/flashgate/flashgate/shared/voucher"
)

// maxForwardBatch bounds the claims of one admitted-write request, within the
// ledger's batch route's api.MaxBatchClaims and api.MaxBatchBytes
// (TestForwardBatchFitsLedgerRoute checks both).
const maxForwardBatch = 256

// forwardLanes is how many admitted-write requests of one voucher may be in
// flight to the ledger at once, each batching what queued behind it: with one,
// the ledger's writer idles while a batch's answer travels back and the next
// one comes; with two, the next batch is already waiting when a transaction
// commits, and the writer (one transaction per voucher at a time) merges
// what the lanes brought. A claim's retry may take the other lane: the ledger
// answers concurrent writes of one order alike (it did already without
// coalescing, one request per claim).
const forwardLanes = 2

// forwardKey is a forward batch's key: the voucher and a lane.
type forwardKey struct {
	code string
	lane uint32
}

// Writer has the ledger write the claims the gate admitted: batched per
// voucher and lane into the ledger's batch route (PROXY_COALESCE on), or one
// request per claim.
type Writer struct {
	ledger   *Client
	coalesce bool
	forward  *batch.Batcher[forwardKey, voucher.Claim, Reply] // admitted writes to the ledger, per voucher and lane
	lane     atomic.Uint32                                    // round robin over forwardLanes
}

// NewWriter returns a writer to ledger whose batches run under base (the
// service's lifetime), of at most maxBatch claims (PROXY_MAX_BATCH) and
// never more than the ledger's batch route accepts.
func NewWriter(base context.Context, ledger *Client, coalesce bool, maxBatch int) *Writer {
	w := &Writer{ledger: ledger, coalesce: coalesce}
	w.forward = batch.New(base, min(maxBatch, maxForwardBatch),
		func(ctx context.Context, k forwardKey, claims []voucher.Claim) ([]Reply, error) {
			return ledger.writeAdmitted(ctx, k.code, claims)
		})
	// Each claim's LEDGER_TIMEOUT runs from its arrival (Write), its wait
	// behind the batch in flight included: a batch gets the earliest
	// deadline of its claims.
	w.forward.CallerDeadlines()
	return w
}

// Write has the ledger write an admitted claim.
func (w *Writer) Write(ctx context.Context, code string, cl voucher.Claim) (Reply, error) {
	if !w.coalesce {
		return w.ledger.Do(ctx, "admitted_write", http.MethodPost, api.InternalPrefix+api.ReservationsPath(code), cl)
	}
	// Admitted together, written together: the ledger commits what one round
	// admitted in one transaction. The claim's LEDGER_TIMEOUT starts now:
	// without it, a claim queued behind a batch that took a whole
	// LEDGER_TIMEOUT (a slow ledger) waited for its own batch's as well, and
	// its 503 came after two (chaos soak, pg-restart: p99 2,025 ms). Still
	// queued at its deadline, it was never sent (batch.ErrDropped: NeverSent).
	ctx, cancel := context.WithTimeout(ctx, w.ledger.http.Timeout)
	defer cancel()
	rep, err := w.forward.Do(ctx, w.key(code), cl)
	return rep, writeErr(code, cl, err)
}

// Forward is one admitted claim handed to WriteAll, and where the ledger's
// answer goes.
type Forward struct {
	Claim voucher.Claim
	Then  func(Reply, error)
}

// WriteAll is Write for claims the gate admitted together, for callers that
// do not wait: it queues them on one lane, together (one request to the
// ledger when the batch's cap allows), and returns at once; each Then gets its
// claim's answer, once, from the goroutine that ran its batch (or from its
// LEDGER_TIMEOUT, when the claim was still queued: never sent). The gate's
// batch hands what it admitted over with it, so that a claim's request wakes
// once, for the ledger's answer, instead of once for the gate's and again for
// the ledger's. Then must not block. The writes run under ctx, which no
// client's leaving should end.
func (w *Writer) WriteAll(ctx context.Context, code string, fs []Forward) {
	if len(fs) == 0 {
		return
	}
	if !w.coalesce {
		for _, f := range fs {
			go func() { f.Then(w.Write(ctx, code, f.Claim)) }()
		}
		return
	}
	// They arrived together: one LEDGER_TIMEOUT from now is each one's, and
	// ends (its timer stops) with the last answer.
	g := &forwardGroup{left: int32(len(fs))}
	var deadline context.Context
	deadline, g.cancel = context.WithTimeout(ctx, w.ledger.http.Timeout)
	calls := make([]batch.Call[voucher.Claim, Reply], len(fs))
	for i, f := range fs {
		calls[i] = batch.Call[voucher.Claim, Reply]{Ctx: deadline, Item: f.Claim, Then: func(rep Reply, err error) {
			g.answered()
			f.Then(rep, writeErr(code, f.Claim, err))
		}}
	}
	w.forward.GoAll(w.key(code), calls)
}

// forwardGroup is the claims of one WriteAll, which share a deadline.
type forwardGroup struct {
	mu     sync.Mutex
	left   int32 // claims not answered yet
	cancel context.CancelFunc
}

// answered counts one claim answered; the last one ends the deadline.
func (g *forwardGroup) answered() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.left--; g.left == 0 {
		g.cancel()
	}
}

// key is the forward batch of code that the next claim takes: the lanes in
// turn.
func (w *Writer) key(code string) forwardKey {
	return forwardKey{code, w.lane.Add(1) % forwardLanes}
}

// writeErr is a forward's error as the proxy answers it: a fault
// (unavailable), whatever kept the ledger's answer from it.
func writeErr(code string, cl voucher.Claim, err error) error {
	if err != nil && !errors.Is(err, voucher.ErrUnavailable) {
		err = fmt.Errorf("write %s/%s: %w: %w", code, cl.OrderID, err, voucher.ErrUnavailable)
	}
	return err
}
