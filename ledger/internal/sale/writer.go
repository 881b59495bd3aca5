package sale

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/batch"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Writer group-commits admitted reservations: the writes for one voucher that
// arrive while its transaction is in flight go together into the next one (one
// multi-row INSERT, one guarded used_count += n, the customers' counts), with
// the same no-timer batching as the proxy's coalescer. Every caller is
// answered only after the transaction holding its write committed. If a batch
// would break a guard, it falls back to writing item by item, so that one bad
// item fails alone.
//
// A standard voucher's reserves (Reserve) are group-committed the same way,
// in their own batches: the database is their only gate, so the guards decide
// each claim, and the voucher's row is locked once per batch instead of once
// per request (1,000 concurrent reserves on one voucher no longer queue for
// its row one commit at a time).
type Writer struct {
	store    *store.Store
	batcher  *batch.Batcher[string, voucher.Claim, store.Written]
	standard *batch.Batcher[string, voucher.Claim, store.Written]
	timeout  time.Duration
	commit   func(time.Duration) // observes each group transaction; may be nil
}

// NewWriter returns a Writer over store. base is the service's lifetime;
// each transaction gets timeout.
func NewWriter(base context.Context, st *store.Store, maxBatch int, timeout time.Duration) *Writer {
	w := &Writer{store: st, timeout: timeout}
	w.batcher = batch.New(base, maxBatch, w.WriteBatch)
	w.standard = batch.New(base, maxBatch, func(ctx context.Context, code string, claims []voucher.Claim) ([]store.Written, error) {
		return w.writeBatch(ctx, code, claims, false)
	})
	return w
}

// ObserveSizes reports each batch's size to f (admitted and standard alike).
func (w *Writer) ObserveSizes(f func(int)) {
	w.batcher.ObserveSizes(f)
	w.standard.ObserveSizes(f)
}

// Reserve writes one claim of a standard voucher (flashSale false), joining
// the transaction of the other reserves of that voucher that arrived while
// the previous one was in flight, and answers once it committed: a
// reservation (replayed when an earlier request wrote it) or why not, as the
// guarded UPDATE answers (paused, out of the window, out of stock, the
// customer at the limit, too small an order).
func (w *Writer) Reserve(ctx context.Context, code string, cl voucher.Claim) (voucher.Reservation, bool, error) {
	out, err := w.standard.Do(ctx, code, cl)
	if err != nil {
		return voucher.Reservation{}, false, err
	}
	return out.Reservation, out.Replayed, out.Err
}

// observeCommits reports each group transaction's duration to f.
func (w *Writer) observeCommits(f func(time.Duration)) { w.commit = f }

// WriteMany makes admitted claims of one voucher durable (idempotent by
// orderId) and returns their answers once committed: a reservation (replayed
// when an earlier request wrote it) or why not. Claims that arrive together
// (the proxy forwards its batches whole) join the same transaction.
func (w *Writer) WriteMany(ctx context.Context, code string, claims []voucher.Claim) []store.Written {
	outs, errs := w.batcher.DoAll(ctx, code, claims)
	for i, err := range errs {
		if err != nil {
			outs[i] = store.Written{Err: err}
		}
	}
	return outs
}

// WriteBatch answers one batch of claims of voucher code: those below the
// minimum order amount at once (unless a retry: see small), the rest through
// writeGroup, a repeated orderId as its first claim.
func (w *Writer) WriteBatch(ctx context.Context, code string, claims []voucher.Claim) ([]store.Written, error) {
	return w.writeBatch(ctx, code, claims, true)
}

// writeBatch is WriteBatch for flash vouchers' admitted claims (flash), or
// for a standard voucher's reserves; a voucher of the other kind fails the
// batch's claims.
func (w *Writer) writeBatch(ctx context.Context, code string, claims []voucher.Claim, flash bool) ([]store.Written, error) {
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	p, err := w.plan(ctx, code, claims, flash)
	if err != nil {
		return nil, err
	}
	var res []store.Written
	if len(p.fresh) > 0 {
		if res, err = w.writeGroup(ctx, p.v, p.group()); err != nil {
			return nil, err
		}
	}
	return w.finish(ctx, p, res), nil
}

// Batch is one voucher's admitted claims among several vouchers' written
// together (WriteBatches; the admissions log's consumer).
type Batch struct {
	Code   string
	Claims []voucher.Claim
	// Promised: the claims' records as their 201s promised them (the
	// consumer writes them as they are); nil for older records, decided
	// with the terms at consume time.
	Promised []store.Logged
}

// writeBatches is WriteBatch for several flash vouchers at once, one batch
// per voucher: their new orders are written in one transaction
// (store.InsertGroups: the vouchers' rows locked in code order) when no guard
// fires, else voucher by voucher as WriteBatch writes them. Each batch's
// claims are answered as WriteBatch answers them; a voucher that is gone or
// not a flash voucher fails its own claims, a fault fails the call.
func (w *Writer) writeBatches(ctx context.Context, batches []Batch) ([][]store.Written, error) {
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	plans := make([]*batchPlan, len(batches))
	var groups []store.Group
	for i, b := range batches {
		p, err := w.plan(ctx, b.Code, b.Claims, true)
		if err != nil && voucher.IsFault(err) {
			return nil, err
		}
		if err != nil {
			p = &batchPlan{claims: b.Claims, out: make([]store.Written, len(b.Claims))}
			for j := range p.out {
				p.out[j].Err = err
			}
		}
		if plans[i] = p; len(p.fresh) > 0 {
			groups = append(groups, store.Group{V: p.v, Claims: p.group()})
		}
	}
	res, err := w.writeGroups(ctx, groups)
	if err != nil {
		return nil, err
	}
	outs := make([][]store.Written, len(batches))
	for i, p := range plans {
		var mine []store.Written
		if len(p.fresh) > 0 {
			mine, res = res[0], res[1:]
		}
		outs[i] = w.finish(ctx, p, mine)
	}
	return outs, nil
}

// writeGroups writes groups (one per flash voucher) in one transaction if no
// guard fires; otherwise each through writeGroup, which finds the claims
// that break it. A refusal costs the vouchers' one transaction once more,
// each on its own: refusals are rare on a flash voucher (Redis admitted the
// claims), and a sell-out inside one is found by the split.
func (w *Writer) writeGroups(ctx context.Context, groups []store.Group) ([][]store.Written, error) {
	if len(groups) == 1 {
		out, err := w.writeGroup(ctx, groups[0].V, groups[0].Claims)
		return [][]store.Written{out}, err
	}
	if len(groups) > 1 {
		start := time.Now()
		out, refused, err := w.store.InsertGroups(ctx, groups)
		if w.commit != nil {
			w.commit(time.Since(start))
		}
		if err != nil || !refused {
			return out, err
		}
	}
	out := make([][]store.Written, len(groups))
	for i, g := range groups {
		var err error
		if out[i], err = w.writeGroup(ctx, g.V, g.Claims); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// batchPlan is one voucher's batch once what needs no insert is answered:
// the claims to insert (one per new orderId) and the later claims of an
// orderId among them.
type batchPlan struct {
	v         voucher.Voucher
	claims    []voucher.Claim
	out       []store.Written
	fresh     []int          // indexes of claims to insert, one per new orderId
	first     map[string]int // orderId -> index of its first claim in this batch
	followers []int          // later claims of an orderId already in fresh
}

// group is the claims p inserts.
func (p *batchPlan) group() []voucher.Claim {
	g := make([]voucher.Claim, len(p.fresh))
	for j, i := range p.fresh {
		g[j] = p.claims[i]
	}
	return g
}

// plan reads voucher code's terms and answers the batch's claims that need
// no insert: all of them when the voucher is not of the batch's kind (flash
// or standard), those below the minimum order amount (unless a retry: see
// small); a repeated orderId follows its first claim.
func (w *Writer) plan(ctx context.Context, code string, claims []voucher.Claim, flash bool) (*batchPlan, error) {
	p := &batchPlan{claims: claims, out: make([]store.Written, len(claims)), first: map[string]int{}}
	v, err := w.store.Terms(ctx, code)
	if err != nil {
		return nil, err
	}
	p.v = v
	if v.FlashSale != flash {
		var err error = voucher.Errorf(voucher.CodeInvalidRequest, "voucher %s is not a flash-sale voucher", code)
		if !flash {
			// It became one since the caller read its terms: its reserves
			// must pass the gate; the retry will.
			err = fmt.Errorf("voucher %s became a flash-sale voucher: %w", code, voucher.ErrUnavailable)
		}
		for i := range p.out {
			p.out[i].Err = err
		}
		return p, nil
	}

	// Orders too small are answered at once; retries of orders that exist are
	// answered from their rows once the group committed (see InsertMany).
	var small map[int]store.Written
	if flash {
		if small, err = w.small(ctx, v, claims); err != nil {
			return nil, err
		}
	} else {
		// A standard voucher's too-small order is answered as the guarded
		// UPDATE alone answers it: a paused or closed voucher says so first.
		for i, cl := range claims {
			if cl.OrderAmount < v.MinOrderAmount {
				if small == nil {
					small = map[int]store.Written{}
				}
				small[i] = w.one(ctx, v, cl)
			}
		}
	}
	for i, cl := range claims {
		if a, ok := small[i]; ok {
			p.out[i] = a
			continue
		}
		if _, dup := p.first[cl.OrderID]; dup {
			p.followers = append(p.followers, i)
			continue
		}
		p.first[cl.OrderID] = i
		p.fresh = append(p.fresh, i)
	}
	return p, nil
}

// finish answers p's claims: those inserted from res (the answers of
// p.group(), in its order), then the followers.
func (w *Writer) finish(ctx context.Context, p *batchPlan, res []store.Written) []store.Written {
	out, claims, code := p.out, p.claims, p.v.Code
	for j, i := range p.fresh {
		out[i] = res[j]
	}
	// A retry that raced its original into the same batch is answered as the
	// original was; the same orderId from another customer meets the row the
	// original wrote (or, if that failed, is tried on its own).
	for _, i := range p.followers {
		lead := out[p.first[claims[i].OrderID]]
		switch {
		case lead.Err == nil:
			out[i] = store.Written{Reservation: lead.Reservation, Err: store.RetryAnswer(lead.Reservation, code, claims[i]), Replayed: true}
		case claims[i] == claims[p.first[claims[i].OrderID]]:
			out[i] = lead // the same claim twice: the same answer
		default:
			out[i] = w.one(ctx, p.v, claims[i])
		}
	}
	return out
}

// small answers the claims below the voucher's minimum order amount (by index):
// a retry of an order that has a row is answered from it, as always (the
// minimum may have been raised since); a new one is ORDER_TOO_SMALL.
func (w *Writer) small(ctx context.Context, v voucher.Voucher, claims []voucher.Claim) (map[int]store.Written, error) {
	var idx []int
	var tooSmall []voucher.Claim
	for i, cl := range claims {
		if cl.OrderAmount < v.MinOrderAmount {
			idx, tooSmall = append(idx, i), append(tooSmall, cl)
		}
	}
	if len(idx) == 0 {
		return nil, nil
	}
	found, ok, err := w.store.ExistingMany(ctx, v.Code, tooSmall)
	if err != nil {
		return nil, err
	}
	out := make(map[int]store.Written, len(idx))
	for j, i := range idx {
		out[i] = found[j]
		if !ok[j] {
			out[i] = store.Written{Err: voucher.ErrOrderTooSmall}
		}
	}
	return out, nil
}

// writeGroup writes claims in one transaction if no guard fires. Otherwise it
// splits the group in halves (earlier arrivals first) until the items that
// break a guard are alone and fail alone: a sell-out inside a batch costs a
// few transactions, not one per item. Once the stock is gone, or the voucher
// is paused or out of its window, the rest are answered without another try.
func (w *Writer) writeGroup(ctx context.Context, v voucher.Voucher, claims []voucher.Claim) ([]store.Written, error) {
	start := time.Now()
	done, refused, err := w.store.InsertMany(ctx, v, claims)
	if w.commit != nil {
		w.commit(time.Since(start))
	}
	switch {
	case err != nil:
		return nil, err
	case !refused:
		return done, nil
	case len(claims) == 1:
		return []store.Written{w.one(ctx, v, claims[0])}, nil
	}
	shut, err := w.store.Shut(ctx, v.Code)
	if err != nil {
		return nil, err
	}
	if shut != nil && !v.FlashSale && errors.Is(shut, voucher.ErrOutOfStock) {
		// No gate decided these: each is answered as the guarded UPDATE
		// alone answers it, the customer's limit before the stock.
		out := make([]store.Written, len(claims))
		for i, cl := range claims {
			out[i] = w.one(ctx, v, cl)
		}
		return out, nil
	}
	if shut != nil {
		// No new order can be written; a retry of one already written is
		// answered with its row, as always.
		out, found, err := w.store.ExistingMany(ctx, v.Code, claims)
		if err != nil {
			return nil, err
		}
		for i := range out {
			if !found[i] {
				out[i].Err = shut
			}
		}
		return out, nil
	}
	mid := len(claims) / 2
	first, err := w.writeGroup(ctx, v, claims[:mid])
	if err != nil {
		return nil, err
	}
	second, err := w.writeGroup(ctx, v, claims[mid:])
	if err != nil {
		return nil, err
	}
	return append(first, second...), nil
}

// one writes a single claim on its own: an admitted one as admitted, a
// standard voucher's as the article's guarded UPDATE alone answers it
// (eligibility, then the customer's limit, then the stock).
func (w *Writer) one(ctx context.Context, v voucher.Voucher, cl voucher.Claim) store.Written {
	if !v.FlashSale {
		r, replayed, err := w.store.Reserve(ctx, v.Code, cl)
		return store.Written{Reservation: r, Err: err, Replayed: replayed}
	}
	r, replayed, err := w.store.InsertAdmitted(ctx, v, cl)
	return store.Written{Reservation: r, Err: err, Replayed: replayed}
}
