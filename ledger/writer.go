package main

import (
	"context"
	"time"

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
type Writer struct {
	store   *Store
	batcher *batch.Batcher[string, voucher.Claim, written]
	timeout time.Duration
	commit  func(time.Duration) // observes each group transaction; may be nil
}

// NewWriter returns a Writer over store. base is the service's lifetime;
// each transaction gets timeout.
func NewWriter(base context.Context, store *Store, maxBatch int, timeout time.Duration) *Writer {
	w := &Writer{store: store, timeout: timeout}
	w.batcher = batch.New(base, maxBatch, w.writeBatch)
	return w
}

// ObserveSizes reports each batch's size to f.
func (w *Writer) ObserveSizes(f func(int)) { w.batcher.ObserveSizes(f) }

// ObserveCommits reports each group transaction's duration to f.
func (w *Writer) ObserveCommits(f func(time.Duration)) { w.commit = f }

// WriteMany makes admitted claims of one voucher durable (idempotent by
// orderId) and returns their reservations once committed. Claims that arrive
// together (the proxy forwards its batches whole) join the same transaction.
func (w *Writer) WriteMany(ctx context.Context, code string, claims []voucher.Claim) ([]voucher.Reservation, []error) {
	outs, errs := w.batcher.DoAll(ctx, code, claims)
	rs := make([]voucher.Reservation, len(claims))
	for i, out := range outs {
		if errs[i] == nil {
			rs[i], errs[i] = out.r, out.err
		}
	}
	return rs, errs
}

// writeBatch answers one batch of claims of voucher code: the ineligible at
// once, the rest through writeGroup, a repeated orderId as its first claim.
func (w *Writer) writeBatch(ctx context.Context, code string, claims []voucher.Claim) ([]written, error) {
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	out := make([]written, len(claims))
	v, err := w.store.Terms(ctx, code)
	if err != nil {
		return nil, err
	}
	if !v.FlashSale {
		err := voucher.Errorf(voucher.CodeInvalidRequest, "voucher %s is not a flash-sale voucher", code)
		for i := range out {
			out[i].err = err
		}
		return out, nil
	}

	// The ineligible are answered at once; retries of orders that exist are
	// answered inside the group's transaction (see InsertMany).
	var fresh []int           // indexes of claims to insert, one per new orderId
	first := map[string]int{} // orderId -> index of its first claim in this batch
	var followers []int       // later claims of an orderId already in fresh
	for i, cl := range claims {
		if cl.OrderAmount < v.MinOrderAmount {
			out[i].err = voucher.NotEligible(voucher.ReasonOrderTooSmall, "the order amount is below the voucher's minimum")
			continue
		}
		if _, dup := first[cl.OrderID]; dup {
			followers = append(followers, i)
			continue
		}
		first[cl.OrderID] = i
		fresh = append(fresh, i)
	}
	if len(fresh) > 0 {
		group := make([]voucher.Claim, len(fresh))
		for j, i := range fresh {
			group[j] = claims[i]
		}
		res, err := w.writeGroup(ctx, v, group)
		if err != nil {
			return nil, err
		}
		for j, i := range fresh {
			out[i] = res[j]
		}
	}
	// A retry that raced its original into the same batch is answered as the
	// original was; the same orderId from another customer meets the row the
	// original wrote (or, if that failed, is tried on its own).
	for _, i := range followers {
		lead := out[first[claims[i].OrderID]]
		switch {
		case lead.err == nil:
			out[i] = written{r: lead.r, err: retryAnswer(lead.r, code, claims[i])}
		case claims[i].CustomerID == claims[first[claims[i].OrderID]].CustomerID:
			out[i] = lead
		default:
			out[i] = w.one(ctx, v, claims[i])
		}
	}
	return out, nil
}

// writeGroup writes claims in one transaction if no guard fires. Otherwise it
// splits the group in halves (earlier arrivals first) until the items that
// break a guard are alone and fail alone: a sell-out inside a batch costs a
// few transactions, not one per item. Once the stock is gone the rest are
// answered OUT_OF_STOCK without another try.
func (w *Writer) writeGroup(ctx context.Context, v voucher.Voucher, claims []voucher.Claim) ([]written, error) {
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
		return []written{w.one(ctx, v, claims[0])}, nil
	}
	left, err := w.store.Remaining(ctx, v.Code)
	if err != nil {
		return nil, err
	}
	if left <= 0 {
		// No use left for a new order; a retry of one already written is
		// answered with its row, as always.
		out, found, err := w.store.ExistingMany(ctx, v.Code, claims)
		if err != nil {
			return nil, err
		}
		for i := range out {
			if !found[i] {
				out[i].err = voucher.ErrOutOfStock
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

// one writes a single claim on its own.
func (w *Writer) one(ctx context.Context, v voucher.Voucher, cl voucher.Claim) written {
	r, err := w.store.InsertAdmitted(ctx, v, cl)
	return written{r: r, err: err}
}
