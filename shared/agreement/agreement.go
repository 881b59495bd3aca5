// Package agreement checks that Redis and Postgres agree about a flash voucher.
//
// The agreement invariant: Redis agrees with Postgres without help. At quiescence
// a flash voucher's Redis state (remaining, orders, per-customer counts, terms)
// is exactly what the database's rows imply, and the reconciler is only a
// safety net for data loss. A repair by the reconciler hides the bug that made
// the drift, so agreement is an invariant the tests check themselves, with the
// reconciler off, rather than a state the reconciler restores. Compare is that
// check: it reads one voucher through the gate's keys and from the database and
// lists every difference.
package agreement

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Querier is what a *pgxpool.Pool, *pgx.Conn or pgx.Tx offers.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Diff lists each way Redis and Postgres disagree about one flash voucher;
// empty when they agree.
type Diff struct {
	Code     string
	Problems []string
}

// OK reports whether Redis and Postgres agree.
func (d Diff) OK() bool { return len(d.Problems) == 0 }

// String is the voucher's code and its problems, one a line.
func (d Diff) String() string {
	if d.OK() {
		return d.Code + ": redis and postgres agree"
	}
	return d.Code + ": redis and postgres disagree:\n\t" + strings.Join(d.Problems, "\n\t")
}

func (d *Diff) addf(format string, args ...any) {
	d.Problems = append(d.Problems, fmt.Sprintf(format, args...))
}

// NotLoaded is the problem a Diff holds when Redis does not hold the voucher.
const NotLoaded = "not loaded in redis"

// Unloaded reports whether the only problem is that Redis does not hold the
// voucher, for a caller that expects that (a voucher never reserved, or one
// whose keys a test deleted and nothing has loaded since).
func (d Diff) Unloaded() bool { return len(d.Problems) == 1 && d.Problems[0] == NotLoaded }

// Compare reads one flash voucher from Redis (through the gate's keys,
// gate.Keys / gate.State / gate.Meta) and from the database and reports every
// difference:
//   - remaining in Redis against total_limit - used_count;
//   - Redis' orders (ids and customers) against the voucher's RESERVED and
//     CONFIRMED rows;
//   - Redis' per-customer counts against voucher_customer_usage.used_count
//     (a count of 0 on either side is the same as no entry);
//   - Redis' terms (gate.Meta) against the voucher row;
//   - promises of a log voucher's admissions (gate.LoggedKey): none may be
//     left once the consumer wrote their rows;
//   - and, inside the database, used_count and the usage table against the
//     active rows, since Redis cannot agree with a database that disagrees
//     with itself.
//
// The done hash (finished orders) is not compared: it only routes retries of
// finished orders to the ledger. A voucher Redis does not hold is one problem,
// NotLoaded, and nothing else is compared. Compare reads Redis in three steps
// and the database in one statement, so it is meant for a quiescent voucher;
// a caller that races writes polls it (agreementtest.RequireAgreement).
func Compare(ctx context.Context, rdb redis.UniversalClient, db Querier, code string) (Diff, error) {
	d := Diff{Code: code}
	want, err := readDB(ctx, db, code)
	if err != nil {
		return d, err
	}
	if !want.terms.FlashSale {
		d.addf("not a flash-sale voucher in the database")
		return d, nil
	}
	got, loaded, err := readRedis(ctx, rdb, code)
	if err != nil {
		return d, err
	}
	if !loaded {
		d.addf(NotLoaded)
		return d, nil
	}
	compareDB(&d, want)
	if r, w := got.remaining, int64(want.terms.TotalLimit-want.terms.UsedCount); r != w {
		d.addf("remaining: redis %d, database total_limit %d - used_count %d = %d",
			r, want.terms.TotalLimit, want.terms.UsedCount, w)
	}
	compareOrders(&d, got.orders, want.orders)
	compareCounts(&d, "per-customer uses: customer %d: redis users %d, database voucher_customer_usage %d",
		got.users, want.usage)
	compareTerms(&d, got.terms, want.terms)
	for _, id := range got.promises {
		d.addf("order %s: a promise left in redis %s: its record is not written", id, gate.LoggedKey(code))
	}
	return d, nil
}

// side is one voucher as one store holds it.
type side struct {
	terms     voucher.Voucher
	remaining int64
	orders    map[string]int64 // orderId -> customer
	users     map[int64]int64  // customer -> uses; no zero counts
	usage     map[int64]int64  // database only: voucher_customer_usage, no zero counts
	promises  []string         // redis only: orderIds promised and not written (gate.LoggedKey)
}

// dbSQL reads a voucher's terms, its active orders and its usage rows in one
// statement, so the three come from one snapshot.
const dbSQL = `
	SELECT v.discount_amount, v.min_order_amount, v.total_limit, v.used_count, v.per_user_limit,
	       v.starts_at, v.ends_at, v.flash_sale, v.paused, v.require_checkout_token,
	       COALESCE((SELECT array_agg(r.order_id ORDER BY r.order_id) FROM voucher_redemption r
	                 WHERE r.voucher_code = v.code AND r.status IN ('RESERVED', 'CONFIRMED')), '{}'),
	       COALESCE((SELECT array_agg(r.customer_id ORDER BY r.order_id) FROM voucher_redemption r
	                 WHERE r.voucher_code = v.code AND r.status IN ('RESERVED', 'CONFIRMED')), '{}'),
	       COALESCE((SELECT array_agg(u.customer_id ORDER BY u.customer_id) FROM voucher_customer_usage u
	                 WHERE u.voucher_code = v.code AND u.used_count <> 0), '{}'),
	       COALESCE((SELECT array_agg(u.used_count::bigint ORDER BY u.customer_id) FROM voucher_customer_usage u
	                 WHERE u.voucher_code = v.code AND u.used_count <> 0), '{}')
	FROM voucher v WHERE v.code = $1`

func readDB(ctx context.Context, db Querier, code string) (side, error) {
	var s side
	var ids []string
	var custs, usageCusts, usageCounts []int64
	v := &s.terms
	err := db.QueryRow(ctx, dbSQL, code).Scan(&v.DiscountAmount, &v.MinOrderAmount, &v.TotalLimit,
		&v.UsedCount, &v.PerUserLimit, &v.StartsAt, &v.EndsAt, &v.FlashSale, &v.Paused, &v.RequireCheckoutToken,
		&ids, &custs, &usageCusts, &usageCounts)
	if errors.Is(err, pgx.ErrNoRows) {
		return side{}, fmt.Errorf("agreement %s: no such voucher in the database", code)
	}
	if err != nil {
		return side{}, fmt.Errorf("agreement %s: read database: %w", code, err)
	}
	v.Code = code
	s.orders = make(map[string]int64, len(ids))
	for i, id := range ids {
		s.orders[id] = custs[i]
	}
	s.usage = make(map[int64]int64, len(usageCusts))
	for i, c := range usageCusts {
		s.usage[c] = usageCounts[i]
	}
	return s, nil
}

// readRedis reads the voucher's counter and orders (gate.State, one step), its
// per-customer counts (the users hash) and its terms (gate.Meta).
func readRedis(ctx context.Context, rdb redis.UniversalClient, code string) (s side, loaded bool, err error) {
	g := gate.New(rdb)
	st, loaded, err := g.State(ctx, code)
	if err != nil || !loaded {
		return side{}, false, wrap(code, err)
	}
	users, err := rdb.HGetAll(ctx, gate.Keys(code)[1]).Result()
	if err != nil {
		return side{}, false, wrap(code, err)
	}
	terms, _, ok, err := g.Meta(ctx, code)
	if err != nil || !ok {
		return side{}, ok, wrap(code, err) // unloaded between the two reads
	}
	promises, err := rdb.HKeys(ctx, gate.LoggedKey(code)).Result()
	if err != nil {
		return side{}, false, wrap(code, err)
	}
	// "#orderId" fields are tombstones of abandoned promises (promise.lua):
	// no hold, no record to write.
	promises = slices.DeleteFunc(promises, func(f string) bool { return strings.HasPrefix(f, "#") })
	slices.Sort(promises)
	s = side{terms: terms, remaining: st.Remaining, promises: promises,
		orders: make(map[string]int64, len(st.Orders)), users: make(map[int64]int64, len(users))}
	for _, o := range st.Orders {
		s.orders[o.OrderID] = o.CustomerID
	}
	for c, n := range users {
		cust, err1 := strconv.ParseInt(c, 10, 64)
		uses, err2 := strconv.ParseInt(n, 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return side{}, false, fmt.Errorf("agreement %s: users hash entry %q = %q: %w", code, c, n, err)
		}
		if uses != 0 {
			s.users[cust] = uses
		}
	}
	return s, true, nil
}

func wrap(code string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("agreement %s: read redis: %w", code, err)
}

// compareDB reports a database that disagrees with itself: used_count and the
// usage table are what the active rows imply.
func compareDB(d *Diff, db side) {
	if n := len(db.orders); n != db.terms.UsedCount {
		d.addf("database: used_count %d, %d active (RESERVED, CONFIRMED) rows", db.terms.UsedCount, n)
	}
	perCustomer := make(map[int64]int64)
	for _, c := range db.orders {
		perCustomer[c]++
	}
	compareCounts(d, "database: customer %d: %d active rows, voucher_customer_usage %d", perCustomer, db.usage)
}

// compareOrders reports each order held on one side only or for two customers.
func compareOrders(d *Diff, redisOrders, dbOrders map[string]int64) {
	for _, id := range slices.Sorted(maps.Keys(redisOrders)) {
		c, ok := dbOrders[id]
		switch {
		case !ok:
			d.addf("order %s (customer %d): in redis orders, no active row in the database", id, redisOrders[id])
		case c != redisOrders[id]:
			d.addf("order %s: customer %d in redis, %d in the database", id, redisOrders[id], c)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(dbOrders)) {
		if _, ok := redisOrders[id]; !ok {
			d.addf("order %s (customer %d): active in the database, not in redis orders", id, dbOrders[id])
		}
	}
}

// compareCounts reports each customer whose count differs (absent = 0);
// format takes the customer and the two counts.
func compareCounts(d *Diff, format string, a, b map[int64]int64) {
	custs := slices.Collect(maps.Keys(a))
	for c := range b {
		if _, ok := a[c]; !ok {
			custs = append(custs, c)
		}
	}
	slices.Sort(custs)
	for _, c := range custs {
		if a[c] != b[c] {
			d.addf(format, c, a[c], b[c])
		}
	}
}

// compareTerms reports each term Redis keeps that differs from the row's.
// Redis keeps times in milliseconds.
func compareTerms(d *Diff, r, db voucher.Voucher) {
	ms := func(t time.Time) int64 { return t.UnixMilli() }
	for _, t := range []struct {
		name      string
		redis, db any
	}{
		{"discountAmount", r.DiscountAmount, db.DiscountAmount},
		{"minOrderAmount", r.MinOrderAmount, db.MinOrderAmount},
		{"totalLimit", r.TotalLimit, db.TotalLimit},
		{"perUserLimit", r.PerUserLimit, db.PerUserLimit},
		{"startsAt (unix ms)", ms(r.StartsAt), ms(db.StartsAt)},
		{"endsAt (unix ms)", ms(r.EndsAt), ms(db.EndsAt)},
		{"flashSale", r.FlashSale, db.FlashSale},
		{"paused", r.Paused, db.Paused},
		{"requireCheckoutToken", r.RequireCheckoutToken, db.RequireCheckoutToken},
	} {
		if t.redis != t.db {
			d.addf("terms: %s: redis %v, database %v", t.name, t.redis, t.db)
		}
	}
}

// Repairs lists the reconcile repairs the database audited for codes (a
// reconcile that released, restored or reloaded something writes an audit row
// with action "reconcile"), one line each: code, actor, what it found and did.
func Repairs(ctx context.Context, db Querier, codes ...string) ([]string, error) {
	rows, err := db.Query(ctx, `
		SELECT voucher_code, actor, coalesce(after::text, '')
		FROM voucher_audit WHERE voucher_code = ANY($1) AND action = 'reconcile' ORDER BY id`, codes)
	if err != nil {
		return nil, fmt.Errorf("reconcile audit: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var code, actor, after string
		if err := rows.Scan(&code, &actor, &after); err != nil {
			return nil, fmt.Errorf("reconcile audit: %w", err)
		}
		out = append(out, code+" by "+actor+": "+after)
	}
	return out, rows.Err()
}
