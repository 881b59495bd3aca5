package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flashgate/flashgate/shared/events"
	"github.com/flashgate/flashgate/shared/voucher"
)

// InsertMany writes claims (distinct orderIds of voucher v) in one statement,
// its own transaction and one round trip to Postgres: one multi-row INSERT,
// one upsert of the customers' counts guarded by the current per-customer
// limit, one guarded used_count += n (stock, pause, validity window on the
// database's clock), and the events, written once the voucher's row is locked.
// If any guard fires, the statement raises (flashgate_refuse), writes nothing,
// and InsertMany reports refused: the writer splits the group until the claim
// that breaks the guard fails alone. A claim whose orderId already has a row
// (a retry) is answered with that row, as Existing answers it: the same
// statement reads the rows committed before it began, and a row committed
// while it ran (the insert waited for it) is read once it committed.
func (s *Store) InsertMany(ctx context.Context, v voucher.Voucher, claims []voucher.Claim) (out []Written, refused bool, err error) {
	rows, err := s.groupCommit(ctx, s.pool, v, claims)
	if err != nil {
		err = translate(fmt.Errorf("write %d reservations for %s: %w", len(claims), v.Code, err))
		if !voucher.IsFault(err) || errors.Is(err, errOrderTaken) {
			return nil, true, nil // a guard or a constraint fired
		}
		return nil, false, err
	}
	return s.answers(ctx, v, claims, rows), false, nil
}

// Group is one voucher's claims (distinct orderIds) in a group commit of
// several vouchers.
type Group struct {
	V      voucher.Voucher
	Claims []voucher.Claim
}

// InsertGroups writes several vouchers' claims, one group per voucher, in one
// transaction: InsertMany's statement once per voucher, in code order, so
// that every voucher row is locked in one order (two such transactions over
// the same vouchers never deadlock on them) and each row lock is held from
// its statement to the one commit. If any voucher's guard fires, nothing is
// written and InsertGroups reports refused: the caller writes the vouchers
// one by one (InsertMany), where the claims that break the guard are found.
// Each group's claims are answered as InsertMany answers them, in the
// groups' order.
func (s *Store) InsertGroups(ctx context.Context, groups []Group) (out [][]Written, refused bool, err error) {
	order := make([]int, len(groups))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(groups[a].V.Code, groups[b].V.Code) })
	rows := make([]map[string]groupRow, len(groups))
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, i := range order {
			g := groups[i]
			r, err := s.groupCommit(ctx, tx, g.V, g.Claims)
			if err != nil {
				return fmt.Errorf("write %d reservations for %s: %w", len(g.Claims), g.V.Code, err)
			}
			rows[i] = r
		}
		return nil
	})
	if err != nil {
		err = translate(fmt.Errorf("write %d vouchers' reservations in one transaction: %w", len(groups), err))
		if !voucher.IsFault(err) || errors.Is(err, errOrderTaken) {
			return nil, true, nil // a guard or a constraint fired
		}
		return nil, false, err
	}
	out = make([][]Written, len(groups))
	for i, g := range groups {
		out[i] = s.answers(ctx, g.V, g.Claims, rows[i])
	}
	return out, false, nil
}

// answers is what a committed group commit of claims of voucher v answers,
// from the rows it returned: a row it inserted, or the row a retry's orderId
// had (read once more, after the commit, when the statement did not see it).
func (s *Store) answers(ctx context.Context, v voucher.Voucher, claims []voucher.Claim, rows map[string]groupRow) []Written {
	out := make([]Written, len(claims))
	var unread []string
	for i, cl := range claims {
		row, ok := rows[cl.OrderID]
		switch {
		case !ok:
			unread = append(unread, cl.OrderID)
		case row.inserted:
			out[i].Reservation = row.r
		default:
			out[i] = Written{Reservation: row.r, Err: RetryAnswer(row.r, v.Code, cl), Replayed: true}
		}
	}
	if len(unread) == 0 {
		return out
	}
	found, readErr := ordersIn(ctx, s.pool, unread)
	if readErr == nil {
		readErr = errors.New("no row")
	}
	for i, cl := range claims {
		if _, ok := rows[cl.OrderID]; ok {
			continue
		}
		if r, ok := found[cl.OrderID]; ok {
			out[i] = Written{Reservation: r, Err: RetryAnswer(r, v.Code, cl), Replayed: true}
			continue
		}
		// The new orders are written; only this retry is not answered. A
		// fault, not an answer: its use stays held until the database can
		// tell (WriteAdmittedMany parks it for the Settler).
		out[i].Err = fmt.Errorf("read order %s once its insert met it: %w", cl.OrderID, readErr)
	}
	return out
}

// prime runs the statements of a sale's hot path on conn without writing
// anything: the group commit of no claims and a read of no voucher's terms.
// Postgres then has the catalogs of every table, index and function they use
// in this connection's caches, and pgx has the statements prepared, so that
// the first commits of a sale run as fast as the later ones.
func (s *Store) prime(ctx context.Context, conn *pgx.Conn) error {
	if _, err := s.groupCommit(ctx, conn, voucher.Voucher{}, nil); err != nil {
		return fmt.Errorf("prime the group commit: %w", err)
	}
	if _, err := conn.Exec(ctx, termsSQL, ""); err != nil {
		return fmt.Errorf("prime the terms read: %w", err)
	}
	return nil
}

// groupRow is a row groupCommit returns: one it inserted, or the row a retry's
// orderId already had.
type groupRow struct {
	r        voucher.Reservation
	inserted bool
}

// groupCommit is InsertMany's statement, run on q (the pool, or the
// connection Prime primes); it returns the rows it inserted and the rows
// committed before it that the claims' orderIds had, by orderId.
// Every table is touched in one order (orders by orderId, customers by id,
// the voucher last, so that its hot row is locked for the shortest time), as
// the other writers do.
func (s *Store) groupCommit(ctx context.Context, q querier, v voucher.Voucher, claims []voucher.Claim) (map[string]groupRow, error) {
	orders := make([]string, len(claims))
	customers := make([]int64, len(claims))
	amounts := make([]int64, len(claims))
	discounts := make([]int64, len(claims))
	for i, cl := range claims {
		orders[i], customers[i] = cl.OrderID, cl.CustomerID
		amounts[i], discounts[i] = cl.OrderAmount, v.DiscountFor(cl.OrderAmount)
	}
	rows, err := q.Query(ctx, groupCommitSQL,
		v.Code, customers, orders, v.Hold(s.ttl).Microseconds(), amounts, discounts, s.events)
	return groupRowsOf(rows, err)
}

// groupRowsOf collects what a group commit's statement (GroupCommitSQL,
// LoggedCommitSQL) returned, by orderId; err is the query's.
func groupRowsOf(rows pgx.Rows, err error) (map[string]groupRow, error) {
	if err != nil {
		return nil, err
	}
	got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (groupRow, error) {
		var g groupRow
		var err error
		g.r, err = scanReservation(row, &g.inserted)
		return g, err
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string]groupRow, len(got))
	for _, g := range got {
		out[g.r.OrderID] = g
	}
	return out, nil
}

// groupCommitSQL: $1 code, $2 customers, $3 orders, $4 the hold in
// microseconds, $5 amounts, $6 discounts, $7 whether events are written.
// Data-modifying CTEs all run, whatever the outer query reads; the outer
// query raises when a guard fired, which undoes every one of them.
const groupCommitSQL = `
WITH t AS (
	SELECT * FROM unnest($2::bigint[], $3::text[], $5::bigint[], $6::bigint[]) WITH ORDINALITY AS t(c, o, a, d, i)
), ins AS (
	INSERT INTO voucher_redemption (voucher_code, customer_id, order_id, status, expires_at,
	                                order_amount, discount_amount)
	SELECT $1, c, o, 'RESERVED', now() + $4 * interval '1 microsecond', a, d FROM t
	ORDER BY o -- one lock order for orderIds: two batches of the same retries never deadlock
	ON CONFLICT (order_id) DO NOTHING
	RETURNING order_id, customer_id, voucher_code, status, discount_amount, created_at, expires_at,
	          order_amount, confirmed_at, released_at, release_reason
), per AS (
	SELECT customer_id AS c, count(*)::int AS n FROM ins GROUP BY customer_id
), used AS (
	-- The customers' counts, guarded by the voucher's CURRENT per_user_limit
	-- (so that a lowered limit stops new uses at once while the uses held
	-- above it stay); the row keeps GREATEST(limit, used_count), so its CHECK
	-- stays the last guard. The limit read here is this statement's snapshot,
	-- which a PATCH may have changed since: an existing row's own limit is
	-- then the fresher one (the PATCH rewrote it before this upsert could lock
	-- the row), and upd checks the new counts against the voucher's row once
	-- it holds that row's lock.
	INSERT INTO voucher_customer_usage AS u (voucher_code, customer_id, used_count, per_user_limit)
	SELECT v.code, per.c, per.n, v.per_user_limit
	FROM per JOIN voucher v ON v.code = $1
	WHERE per.n <= v.per_user_limit
	ORDER BY per.c -- one lock order for customers' rows, as the sweeper's
	ON CONFLICT (voucher_code, customer_id)
	DO UPDATE SET used_count = u.used_count + EXCLUDED.used_count,
	              per_user_limit = GREATEST(u.per_user_limit, u.used_count + EXCLUDED.used_count)
	WHERE u.used_count + EXCLUDED.used_count <= EXCLUDED.per_user_limit
	RETURNING customer_id, used_count
), upd AS (
	-- Its WHERE is checked again on the row's newest version once the lock is
	-- held (READ COMMITTED), so a PATCH that committed meanwhile is obeyed:
	-- stock, pause, window, and the per-customer limit for the new counts.
	UPDATE voucher SET used_count = used_count + (SELECT count(*) FROM ins)
	WHERE code = $1 AND (SELECT count(*) FROM ins) > 0
	  AND used_count + (SELECT count(*) FROM ins) <= total_limit
	  AND NOT paused AND now() >= starts_at AND now() < ends_at
	  AND (SELECT count(*) FROM used) = (SELECT count(*) FROM per)
	  AND (SELECT coalesce(max(used_count), 0) FROM used) <= per_user_limit
	RETURNING used_count, total_limit
), ev AS (
	-- Once the voucher's row is locked, so that a voucher's events are
	-- numbered in the order its changes commit.
	INSERT INTO voucher_event (type, voucher_code, data)
	SELECT x.type, $1, x.data FROM (
		SELECT 1 AS k, t.i, '` + events.ReservationReserved + `' AS type, jsonb_build_object(
		       'orderId', t.o, 'customerId', t.c, 'orderAmount', t.a, 'discountAmount', t.d,
		       'expiresAt', event_time(ins.expires_at)) AS data
		FROM upd, ins JOIN t ON t.o = ins.order_id
		UNION ALL
		SELECT 2, 0, '` + events.VoucherSoldOut + `', jsonb_build_object('totalLimit', total_limit, 'usedCount', used_count)
		FROM upd WHERE used_count = total_limit
	) x WHERE $7 ORDER BY x.k, x.i
), refused AS (
	SELECT CASE
		WHEN (SELECT count(*) FROM ins) = 0 OR EXISTS (SELECT 1 FROM upd) THEN NULL
		WHEN (SELECT count(*) FROM used) <> (SELECT count(*) FROM per) THEN '` + voucher.CodeAlreadyUsed + `'
		WHEN v.paused THEN '` + voucher.ReasonPaused + `'
		WHEN now() < v.starts_at THEN '` + voucher.ReasonNotStarted + `'
		WHEN now() >= v.ends_at THEN '` + voucher.ReasonExpired + `'
		ELSE '` + voucher.CodeOutOfStock + `' END AS why
	FROM voucher v WHERE v.code = $1
)
SELECT true, ins.order_id, ins.customer_id, ins.voucher_code, ins.status, ins.discount_amount,
       ins.created_at, ins.expires_at, ins.order_amount, ins.confirmed_at, ins.released_at, ins.release_reason
FROM ins, refused
WHERE refused.why IS NULL OR flashgate_refuse(refused.why)
UNION ALL
-- The rows the retries' orderIds had: this statement's snapshot does not see
-- the rows ins wrote, only those committed before it began. Read only when
-- some orderId was not inserted (a one-time filter; most groups hold no
-- retry), one index probe per orderId (see redemptionsOf).
SELECT false, ` + reservationColumns + `
FROM ` + redemptionsOf + `($3::text[])` + redemptionsOfEnd + `
WHERE (SELECT count(*) FROM ins) < cardinality($3::text[])`

// redemptionsOf + "(ids)" + redemptionsOfEnd is a FROM item: the
// voucher_redemption rows (as r; its columns need no prefix) of the orderIds
// in the text array ids, found by one probe of the order_id index each. The LIMIT keeps the subquery from
// being merged into a join, so the planner cannot trade the probes for a scan
// of the whole table, as it may for "r.order_id = ANY(ids)": pgx prepares its
// statements, and Postgres keeps the generic plan it made from the table's size
// when a connection first ran them, empty at a ledger's start on a new
// database. Such a plan read every row of the table in each group commit that
// held a retry once the table had grown (TestOrderLookupsProbeTheIndex).
const (
	redemptionsOf    = `(SELECT DISTINCT unnest`
	redemptionsOfEnd = `) AS q(id)
	CROSS JOIN LATERAL (SELECT * FROM voucher_redemption x WHERE x.order_id = q.id LIMIT 1) r`
)

// refusalSQLState is the SQLSTATE flashgate_refuse raises (migration 0004).
const refusalSQLState = "FG001"

// refusal maps what flashgate_refuse raised to the guard that fired.
func refusal(pe *pgconn.PgError) error {
	switch pe.Message {
	case voucher.CodeAlreadyUsed:
		return voucher.ErrAlreadyUsed
	case voucher.ReasonPaused:
		return voucher.ErrPaused
	case voucher.ReasonNotStarted:
		return voucher.ErrNotStarted
	case voucher.ReasonExpired:
		return voucher.ErrExpired
	}
	return voucher.ErrOutOfStock
}
