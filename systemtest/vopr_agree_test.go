package systemtest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/shared/gate"
)

// voprQuerier is what agree reads the database with (a *pgxpool.Pool).
type voprQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// agree reports where a flash voucher's Redis state differs from what its
// database rows imply (Redis agrees with Postgres on its own): remaining = total_limit -
// used_count, the orders hash = the active rows (with their customers), the
// users hash = the usage table, the terms = the voucher row's, and every key
// with its TTL. nil: they agree.
//
// It stands in for shared/agreement's Compare, written on another branch at
// the same time; once that is merged, this body becomes
// `d, err := agreement.Compare(ctx, rdb, db, code); if err == nil && !d.OK() { err = errors.New(d.String()) }`.
func agree(ctx context.Context, rdb redis.UniversalClient, db voprQuerier, code string) error {
	g := gate.New(rdb)
	st, loaded, err := g.State(ctx, code)
	if err != nil {
		return err
	}
	if !loaded {
		return fmt.Errorf("%s is not loaded in redis", code)
	}
	meta, _, metaOK, err := g.Meta(ctx, code)
	if err != nil {
		return err
	}
	keys := gate.Keys(code)
	users, err := rdb.HGetAll(ctx, keys[1]).Result()
	if err != nil {
		return err
	}

	var total, used, perUser int
	var paused bool
	var startsAt, endsAt time.Time
	var discount, minOrder int64
	if err := db.QueryRow(ctx, `SELECT total_limit, used_count, per_user_limit, paused, starts_at, ends_at,
		       discount_amount, min_order_amount FROM voucher WHERE code = $1`, code).
		Scan(&total, &used, &perUser, &paused, &startsAt, &endsAt, &discount, &minOrder); err != nil {
		return fmt.Errorf("read voucher %s: %w", code, err)
	}
	active, err := queryPairs(ctx, db, `SELECT order_id, customer_id FROM voucher_redemption
		WHERE voucher_code = $1 AND status IN ('RESERVED', 'CONFIRMED')`, code)
	if err != nil {
		return err
	}
	usage, err := queryPairs(ctx, db, `SELECT customer_id::text, used_count FROM voucher_customer_usage
		WHERE voucher_code = $1 AND used_count > 0`, code)
	if err != nil {
		return err
	}

	var problems []string
	if want := int64(total - used); st.Remaining != want {
		problems = append(problems, fmt.Sprintf("redis remaining %d, database total_limit %d - used_count %d = %d",
			st.Remaining, total, used, want))
	}
	inRedis := map[string]int64{}
	for _, o := range st.Orders {
		inRedis[o.OrderID] = o.CustomerID
	}
	for _, id := range sortedKeys(active) {
		c, ok := inRedis[id]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("redis lacks order %s (customer %d), active in the database", id, active[id]))
		case c != active[id]:
			problems = append(problems, fmt.Sprintf("redis holds order %s for customer %d, the database for %d", id, c, active[id]))
		}
	}
	for _, id := range sortedKeys(inRedis) {
		if _, ok := active[id]; !ok {
			problems = append(problems, fmt.Sprintf("redis holds order %s (customer %d), not active in the database", id, inRedis[id]))
		}
	}
	redisUsers := map[string]int64{}
	for c, v := range users {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			problems = append(problems, fmt.Sprintf("redis users[%s] = %q", c, v))
		}
		if n != 0 {
			redisUsers[c] = n
		}
	}
	for _, c := range sortedKeys(usage) {
		if redisUsers[c] != usage[c] {
			problems = append(problems, fmt.Sprintf("redis users[%s] = %d, database usage %d", c, redisUsers[c], usage[c]))
		}
	}
	for _, c := range sortedKeys(redisUsers) {
		if _, ok := usage[c]; !ok {
			problems = append(problems, fmt.Sprintf("redis users[%s] = %d, database usage 0", c, redisUsers[c]))
		}
	}
	switch {
	case !metaOK:
		problems = append(problems, "redis has no meta")
	case meta.TotalLimit != total || meta.PerUserLimit != perUser || meta.Paused != paused ||
		meta.StartsAt.UnixMilli() != startsAt.UnixMilli() || meta.EndsAt.UnixMilli() != endsAt.UnixMilli() ||
		meta.DiscountAmount != discount || meta.MinOrderAmount != minOrder:
		problems = append(problems, fmt.Sprintf("redis terms {total %d, per user %d, paused %v, %s..%s, discount %d, min %d}, "+
			"database {total %d, per user %d, paused %v, %s..%s, discount %d, min %d}",
			meta.TotalLimit, meta.PerUserLimit, meta.Paused, meta.StartsAt.UTC().Format(time.RFC3339Nano), meta.EndsAt.UTC().Format(time.RFC3339Nano),
			meta.DiscountAmount, meta.MinOrderAmount,
			total, perUser, paused, startsAt.UTC().Format(time.RFC3339Nano), endsAt.UTC().Format(time.RFC3339Nano), discount, minOrder))
	}
	for _, k := range keys {
		ttl, err := rdb.PTTL(ctx, k).Result()
		if err != nil {
			return err
		}
		if ttl == -1 { // exists without an expiry (-2: absent, as an empty hash is)
			problems = append(problems, fmt.Sprintf("redis key %s has no TTL", k))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// queryPairs reads rows of (text, bigint) into a map.
func queryPairs(ctx context.Context, db voprQuerier, sql string, args ...any) (map[string]int64, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var v int64
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, rows.Err()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
