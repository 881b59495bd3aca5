package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flashgate/flashgate/shared/events"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Logged is an admission of a log voucher as its 201 promised it: the
// claim, the discount and the hold's expiry the gate's terms gave it at
// admission. The consumer writes it as it is; the terms at consume time
// decide nothing.
type Logged struct {
	Claim          voucher.Claim
	DiscountAmount int64
	AdmittedAt     time.Time
	ExpiresAt      time.Time
}

// HoldOf is how long a reservation of v is held: its own hold, else the
// service's HOLD_TTL.
func (s *Store) HoldOf(v voucher.Voucher) time.Duration { return v.Hold(s.ttl) }

// LoggedGroup is one voucher's promised admissions (distinct orderIds) in a
// write of several vouchers.
type LoggedGroup struct {
	Code    string
	Records []Logged
}

// InsertLogged writes each group's promised admissions in one transaction,
// in code order (InsertGroups's lock order): the rows with the promised
// discount, admission time and expiry, the customers' counts and used_count,
// with no guard of pause, window, minimum, current per-customer limit or
// stock: only the database's own constraints can refuse them. A constraint
// that fires is refused (the domain error it maps to, or an INVALID_REQUEST
// naming it): nothing is written and the caller splits the groups to find
// the record that breaks it. An orderId that has a row already is answered
// from it, as InsertMany answers a retry. err is a fault.
func (s *Store) InsertLogged(ctx context.Context, groups []LoggedGroup) (out [][]Written, refused, err error) {
	order := make([]int, len(groups))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(groups[a].Code, groups[b].Code) })
	rows := make([]map[string]groupRow, len(groups))
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, i := range order {
			r, err := s.loggedCommit(ctx, tx, groups[i])
			if err != nil {
				return fmt.Errorf("write %d logged admissions of %s: %w", len(groups[i].Records), groups[i].Code, err)
			}
			rows[i] = r
		}
		return nil
	})
	if err != nil {
		if why := constraintRefusal(err); why != nil {
			return nil, why, nil
		}
		return nil, nil, translate(err)
	}
	out = make([][]Written, len(groups))
	for i, g := range groups {
		claims := make([]voucher.Claim, len(g.Records))
		for j, r := range g.Records {
			claims[j] = r.Claim
		}
		out[i] = s.answers(ctx, voucher.Voucher{Code: g.Code}, claims, rows[i])
	}
	return out, nil, nil
}

// constraintRefusal is the refusal of a statement the database refused
// for its data (Rejected: an integrity constraint or a data exception): the
// domain error a known guard maps to, or one naming it that wraps
// ErrRejected; nil for anything else (a fault).
func constraintRefusal(err error) error {
	what, ok := Rejected(err)
	if !ok {
		return nil
	}
	var ve *voucher.Error
	if t := translate(err); errors.As(t, &ve) {
		return t
	}
	return fmt.Errorf("%w: %w", voucher.Errorf(voucher.CodeInvalidRequest, "the database rejected the row: %s", what), ErrRejected)
}

// loggedCommit is InsertLogged's statement for one group, run in tx.
func (s *Store) loggedCommit(ctx context.Context, tx pgx.Tx, g LoggedGroup) (map[string]groupRow, error) {
	n := len(g.Records)
	orders, customers := make([]string, n), make([]int64, n)
	amounts, discounts := make([]int64, n), make([]int64, n)
	admitted, expires := make([]time.Time, n), make([]time.Time, n)
	for i, r := range g.Records {
		orders[i], customers[i] = r.Claim.OrderID, r.Claim.CustomerID
		amounts[i], discounts[i] = r.Claim.OrderAmount, r.DiscountAmount
		admitted[i], expires[i] = r.AdmittedAt, r.ExpiresAt
	}
	return groupRowsOf(tx.Query(ctx, loggedCommitSQL, g.Code, customers, orders, amounts, discounts, admitted, expires, s.events))
}

// loggedCommitSQL is GroupCommitSQL for promised admissions: $1 code, $2
// customers, $3 orders, $4 amounts, $5 discounts, $6 admission times (the
// rows' created_at), $7 expiries, $8 whether events are written. No WHERE
// of pause, window, current limits or stock: the gate decided, and the 201
// is final. The customers' rows keep GREATEST(limit, used_count) so that
// their CHECK holds, and the voucher's used_count <= total_limit CHECK stays
// the last guard (a PATCH below the uses held in the log is refused first).
const loggedCommitSQL = `
WITH t AS (
	SELECT * FROM unnest($2::bigint[], $3::text[], $4::bigint[], $5::bigint[], $6::timestamptz[], $7::timestamptz[])
		WITH ORDINALITY AS t(c, o, a, d, cr, e, i)
), ins AS (
	INSERT INTO voucher_redemption (voucher_code, customer_id, order_id, status, created_at, expires_at,
	                                order_amount, discount_amount)
	SELECT $1, c, o, 'RESERVED', cr, e, a, d FROM t
	ORDER BY o
	ON CONFLICT (order_id) DO NOTHING
	RETURNING order_id, customer_id, voucher_code, status, discount_amount, created_at, expires_at,
	          order_amount, confirmed_at, released_at, release_reason
), per AS (
	SELECT customer_id AS c, count(*)::int AS n FROM ins GROUP BY customer_id
), used AS (
	INSERT INTO voucher_customer_usage AS u (voucher_code, customer_id, used_count, per_user_limit)
	SELECT v.code, per.c, per.n, GREATEST(v.per_user_limit, per.n)
	FROM per JOIN voucher v ON v.code = $1
	ORDER BY per.c
	ON CONFLICT (voucher_code, customer_id)
	DO UPDATE SET used_count = u.used_count + EXCLUDED.used_count,
	              per_user_limit = GREATEST(u.per_user_limit, u.used_count + EXCLUDED.used_count)
	RETURNING customer_id
), upd AS (
	UPDATE voucher SET used_count = used_count + (SELECT count(*) FROM ins)
	WHERE code = $1 AND (SELECT count(*) FROM ins) > 0
	RETURNING used_count, total_limit
), ev AS (
	INSERT INTO voucher_event (type, voucher_code, data)
	SELECT x.type, $1, x.data FROM (
		SELECT 1 AS k, t.i, '` + events.ReservationReserved + `' AS type, jsonb_build_object(
		       'orderId', t.o, 'customerId', t.c, 'orderAmount', t.a, 'discountAmount', t.d,
		       'expiresAt', event_time(ins.expires_at)) AS data
		FROM upd, ins JOIN t ON t.o = ins.order_id
		UNION ALL
		SELECT 2, 0, '` + events.VoucherSoldOut + `', jsonb_build_object('totalLimit', total_limit, 'usedCount', used_count)
		FROM upd WHERE used_count = total_limit
	) x WHERE $8 ORDER BY x.k, x.i
)
SELECT true, ins.order_id, ins.customer_id, ins.voucher_code, ins.status, ins.discount_amount,
       ins.created_at, ins.expires_at, ins.order_amount, ins.confirmed_at, ins.released_at, ins.release_reason
FROM ins
UNION ALL
SELECT false, ` + reservationColumns + `
FROM ` + redemptionsOf + `($3::text[])` + redemptionsOfEnd + `
WHERE (SELECT count(*) FROM ins) < cardinality($3::text[])`
