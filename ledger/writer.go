package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

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

// written is one item's outcome.
type written struct {
	r   voucher.Reservation
	err error
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

// Write makes one admitted claim durable (idempotent by orderId) and returns
// its reservation once committed.
func (w *Writer) Write(ctx context.Context, code string, cl voucher.Claim) (voucher.Reservation, error) {
	out, err := w.batcher.Do(ctx, code, cl)
	if err != nil {
		return voucher.Reservation{}, err
	}
	return out.r, out.err
}

// WriteMany is Write for several claims of one voucher that arrived together
// (the proxy forwards its batches whole): they join the same transaction.
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
			out[i] = written{r: lead.r, err: retryAnswer(lead.r, code, claims[i].CustomerID)}
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
	out := make([]written, len(claims))
	start := time.Now()
	rs, existed, err := w.store.InsertMany(ctx, v, claims)
	if w.commit != nil {
		w.commit(time.Since(start))
	}
	switch {
	case err == nil:
		for i, cl := range claims {
			out[i].r = rs[i]
			if existed[i] {
				out[i].err = retryAnswer(rs[i], v.Code, cl.CustomerID)
			}
		}
		return out, nil
	case !errors.Is(err, errGroupRefused):
		return nil, err
	case len(claims) == 1:
		out[0] = w.one(ctx, v, claims[0])
		return out, nil
	}
	left, err := w.store.Remaining(ctx, v.Code)
	if err != nil {
		return nil, err
	}
	if left <= 0 {
		// No use left for a new order; a retry of one already written is
		// answered with its row, as always.
		ids := make([]string, len(claims))
		for i, cl := range claims {
			ids[i] = cl.OrderID
		}
		found, err := ordersIn(ctx, w.store.pool, ids)
		if err != nil {
			return nil, translate(fmt.Errorf("orders of a refused group: %w", err))
		}
		for i, cl := range claims {
			if r, ok := found[cl.OrderID]; ok {
				out[i] = written{r: r, err: retryAnswer(r, v.Code, cl.CustomerID)}
				continue
			}
			out[i].err = voucher.ErrOutOfStock
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

// one writes a single claim, answering as the winner did if a concurrent
// request took its orderId first.
func (w *Writer) one(ctx context.Context, v voucher.Voucher, cl voucher.Claim) written {
	for {
		r, found, err := w.store.Existing(ctx, v.Code, cl)
		if found || err != nil {
			return written{r: r, err: err}
		}
		r, err = w.store.Insert(ctx, v, cl)
		if !errors.Is(err, errOrderTaken) {
			return written{r: r, err: err}
		}
	}
}

// Remaining returns total_limit - used_count as the database has it now.
func (s *Store) Remaining(ctx context.Context, code string) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT total_limit - used_count FROM voucher WHERE code = $1`, code).Scan(&n)
	if err != nil {
		return 0, translate(fmt.Errorf("remaining %s: %w", code, err))
	}
	return n, nil
}

// errGroupRefused means a group write would break a guard (stock, a
// customer's limit, the validity window) or met a concurrent insert of one of
// its orderIds; nothing was written.
var errGroupRefused = errors.New("group write refused")

// ordersIn returns the reservations of the given orderIds that exist, whatever
// their voucher, read through q (a pool or a transaction).
func ordersIn(ctx context.Context, q querier, orderIDs []string) (map[string]voucher.Reservation, error) {
	rows, err := q.Query(ctx, `
		SELECT r.order_id, r.customer_id, r.voucher_code, r.status, v.discount_amount,
		       r.created_at, r.expires_at
		FROM voucher_redemption r JOIN voucher v ON v.code = r.voucher_code
		WHERE r.order_id = ANY($1)`, orderIDs)
	if err != nil {
		return nil, err
	}
	found := map[string]voucher.Reservation{}
	var r voucher.Reservation
	_, err = pgx.ForEachRow(rows, []any{&r.OrderID, &r.CustomerID, &r.VoucherCode, &r.Status,
		&r.DiscountAmount, &r.CreatedAt, &r.ExpiresAt}, func() error {
		r.CreatedAt, r.ExpiresAt = r.CreatedAt.UTC(), r.ExpiresAt.UTC()
		found[r.OrderID] = r
		return nil
	})
	return found, err
}

// InsertMany writes claims (distinct orderIds of voucher v) in one
// transaction: one multi-row INSERT, one upsert of the customers' counts and
// one guarded used_count += n. A claim whose orderId already has a row (a
// retry) is answered with that row, read in the same transaction (existed[i]),
// so a batch costs one commit whatever it holds. If any guard would fire, it
// writes nothing and returns errGroupRefused.
func (s *Store) InsertMany(ctx context.Context, v voucher.Voucher, claims []voucher.Claim) (rs []voucher.Reservation, existed []bool, err error) {
	orders := make([]string, len(claims))
	customers := make([]int64, len(claims))
	for i, cl := range claims {
		orders[i], customers[i] = cl.OrderID, cl.CustomerID
	}
	rs = make([]voucher.Reservation, len(claims))
	existed = make([]bool, len(claims))
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			INSERT INTO voucher_redemption (voucher_code, customer_id, order_id, status, expires_at)
			SELECT $1, c, o, 'RESERVED', now() + $4 * interval '1 microsecond'
			FROM unnest($2::bigint[], $3::text[]) AS t(c, o)
			ON CONFLICT (order_id) DO NOTHING
			RETURNING order_id, created_at, expires_at`, v.Code, customers, orders, s.ttl.Microseconds())
		if err != nil {
			return err
		}
		at := map[string][2]time.Time{}
		var id string
		var created, expires time.Time
		if _, err := pgx.ForEachRow(rows, []any{&id, &created, &expires}, func() error {
			at[id] = [2]time.Time{created.UTC(), expires.UTC()}
			return nil
		}); err != nil {
			return err
		}
		perCustomer := map[int64]int{}
		var retried []string
		for i, cl := range claims {
			if _, ok := at[cl.OrderID]; ok {
				perCustomer[cl.CustomerID]++
			} else {
				existed[i] = true
				retried = append(retried, cl.OrderID)
			}
		}
		if len(retried) > 0 {
			found, err := ordersIn(ctx, tx, retried)
			if err != nil {
				return err
			}
			for i, cl := range claims {
				if existed[i] {
					r, ok := found[cl.OrderID]
					if !ok {
						return errGroupRefused // inserted by a transaction not yet visible
					}
					rs[i] = r
				}
			}
		}
		if len(perCustomer) == 0 {
			return nil
		}
		ucust := make([]int64, 0, len(perCustomer))
		ucount := make([]int32, 0, len(perCustomer))
		for c, n := range perCustomer {
			ucust, ucount = append(ucust, c), append(ucount, int32(n))
		}
		tag, err := tx.Exec(ctx, `
			INSERT INTO voucher_customer_usage AS u (voucher_code, customer_id, used_count, per_user_limit)
			SELECT $1, c, n, $4 FROM unnest($2::bigint[], $3::int[]) AS t(c, n)
			WHERE n <= $4
			ORDER BY c -- one lock order for customers' rows, as the sweeper's
			ON CONFLICT (voucher_code, customer_id)
			DO UPDATE SET used_count = u.used_count + EXCLUDED.used_count
			WHERE u.used_count + EXCLUDED.used_count <= u.per_user_limit`,
			v.Code, ucust, ucount, v.PerUserLimit)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != int64(len(ucust)) {
			return errGroupRefused
		}
		if err := takeVoucherUses(ctx, tx, v.Code, len(at), true); err != nil {
			if errors.As(err, new(*voucher.Error)) {
				return errGroupRefused
			}
			return err
		}
		for i, cl := range claims {
			if existed[i] {
				continue
			}
			rs[i] = voucher.Reservation{
				OrderID: cl.OrderID, CustomerID: cl.CustomerID, VoucherCode: v.Code,
				Status: voucher.Reserved, DiscountAmount: v.DiscountAmount,
				CreatedAt: at[cl.OrderID][0], ExpiresAt: at[cl.OrderID][1],
			}
		}
		return nil
	})
	if errors.Is(err, errGroupRefused) {
		return nil, nil, err
	}
	if err != nil {
		err = translate(fmt.Errorf("write %d reservations for %s: %w", len(claims), v.Code, err))
		if errors.As(err, new(*voucher.Error)) || errors.Is(err, errOrderTaken) {
			return nil, nil, errGroupRefused // a constraint fired: find the item one at a time
		}
		return nil, nil, err
	}
	return rs, existed, nil
}
