package agreement_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/migrations"
	"github.com/flashgate/flashgate/shared/agreement"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/testkit/agreementtest"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
	"github.com/flashgate/flashgate/shared/voucher"
)

func TestMain(m *testing.M) { os.Exit(devstacktest.RunTests(m)) }

// servers returns clients of the shared Redis and of the shared, migrated Postgres.
func servers(tb testing.TB) (*redis.Client, *pgxpool.Pool) {
	tb.Helper()
	ctx := context.Background()
	opts, err := redis.ParseURL(devstacktest.RedisURL(tb))
	require.NoError(tb, err)
	rdb := redis.NewClient(opts)
	tb.Cleanup(func() { rdb.Close() })
	dbURL := devstacktest.PostgresURL(tb)
	require.NoError(tb, migrations.MigrateURL(ctx, dbURL))
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(tb, err)
	tb.Cleanup(pool.Close)
	return rdb, pool
}

var seq atomic.Int64

// sale writes a flash voucher (limit 10, 2 per customer) with three active
// orders (customer 1 twice, customer 2 once) and one released (customer 3)
// to the database, and loads the same into Redis as warmup would.
func sale(tb testing.TB, rdb *redis.Client, db *pgxpool.Pool) string {
	tb.Helper()
	ctx := context.Background()
	code := fmt.Sprintf("agree-%d-%d", time.Now().UnixNano()%1_000_000, seq.Add(1))
	v := voucher.Voucher{
		Code: code,
		Terms: voucher.Terms{
			DiscountAmount: 500,
			MinOrderAmount: 1000,
			TotalLimit:     10,
			PerUserLimit:   2,
			StartsAt:       time.Now().Add(-time.Hour).Truncate(time.Millisecond).UTC(),
			EndsAt:         time.Now().Add(time.Hour).Truncate(time.Millisecond).UTC(),
			FlashSale:      true,
		},
	}
	_, err := db.Exec(ctx, `INSERT INTO voucher (code, discount_amount, min_order_amount, total_limit, used_count,
		per_user_limit, starts_at, ends_at, flash_sale) VALUES ($1, $2, $3, $4, 3, $5, $6, $7, true)`,
		code, v.DiscountAmount, v.MinOrderAmount, v.TotalLimit, v.PerUserLimit, v.StartsAt, v.EndsAt)
	require.NoError(tb, err)
	active := []gate.Order{{OrderID: code + "-a", CustomerID: 1}, {OrderID: code + "-b", CustomerID: 1}, {OrderID: code + "-c", CustomerID: 2}}
	for i, o := range active {
		status := []string{"RESERVED", "CONFIRMED", "RESERVED"}[i]
		_, err := db.Exec(ctx, `INSERT INTO voucher_redemption (voucher_code, customer_id, order_id, status, expires_at,
			discount_amount, confirmed_at) VALUES ($1, $2, $3, $4::varchar, now() + interval '15 minutes', 500,
			CASE WHEN $4::varchar = 'CONFIRMED' THEN now() END)`, code, o.CustomerID, o.OrderID, status)
		require.NoError(tb, err)
	}
	_, err = db.Exec(ctx, `INSERT INTO voucher_redemption (voucher_code, customer_id, order_id, status, expires_at,
		discount_amount, released_at, release_reason) VALUES ($1, 3, $2, 'RELEASED', now(), 500, now(), 'CANCELLED')`,
		code, code+"-d")
	require.NoError(tb, err)
	_, err = db.Exec(ctx, `INSERT INTO voucher_customer_usage (voucher_code, customer_id, used_count, per_user_limit)
		VALUES ($1, 1, 2, 2), ($1, 2, 1, 2), ($1, 3, 0, 2)`, code)
	require.NoError(tb, err)
	loaded, err := gate.New(rdb).Load(ctx, code, gate.Snapshot{Voucher: v, Remaining: 7, Orders: active,
		Finished: []gate.Order{{OrderID: code + "-d", CustomerID: 3}}})
	require.NoError(tb, err)
	require.True(tb, loaded)
	tb.Cleanup(func() { rdb.Del(context.Background(), gate.Keys(code)...) })
	return code
}

func TestCompareAgrees(t *testing.T) {
	rdb, db := servers(t)
	code := sale(t, rdb, db)
	d, err := agreement.Compare(context.Background(), rdb, db, code)
	require.NoError(t, err)
	require.True(t, d.OK(), "Compare(%s) = %v, want agreement", code, d)
	agreementtest.RequireAgreement(t, rdb, db, code)

	// The done hash is not compared; a customer whose count went to 0 in
	// Redis and whose usage row says 0 agree.
	k := gate.Keys(code)
	require.NoError(t, rdb.HSet(context.Background(), k[4], "some-other-order", "9").Err())
	require.NoError(t, rdb.HSet(context.Background(), k[1], "3", "0").Err())
	d, err = agreement.Compare(context.Background(), rdb, db, code)
	require.NoError(t, err)
	require.True(t, d.OK(), "Compare(%s) = %v, want agreement", code, d)
}

// TestCompareReportsEachDifference corrupts Redis (and the database) by hand,
// one way per case, and wants that difference, and only it, reported.
func TestCompareReportsEachDifference(t *testing.T) {
	rdb, db := servers(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		corrupt func(code string, k []string) error
		want    []string
	}{
		{"remaining", func(code string, k []string) error { return rdb.IncrBy(ctx, k[0], 2).Err() },
			[]string{"remaining: redis 9, database total_limit 10 - used_count 3 = 7"}},
		{"order missing in redis", func(code string, k []string) error { return rdb.HDel(ctx, k[2], code+"-a").Err() },
			[]string{"order %s-a (customer 1): active in the database, not in redis orders"}},
		{"order only in redis", func(code string, k []string) error { return rdb.HSet(ctx, k[2], code+"-x", "4:1").Err() },
			[]string{"order %s-x (customer 4): in redis orders, no active row in the database"}},
		{"order of another customer", func(code string, k []string) error { return rdb.HSet(ctx, k[2], code+"-c", "5:1").Err() },
			[]string{"order %s-c: customer 5 in redis, 2 in the database"}},
		{"released order still in redis", func(code string, k []string) error { return rdb.HSet(ctx, k[2], code+"-d", "3:1").Err() },
			[]string{"order %s-d (customer 3): in redis orders, no active row in the database"}},
		{"user count", func(code string, k []string) error { return rdb.HIncrBy(ctx, k[1], "2", 1).Err() },
			[]string{"per-customer uses: customer 2: redis users 2, database voucher_customer_usage 1"}},
		{"user only in redis", func(code string, k []string) error { return rdb.HSet(ctx, k[1], "3", "1").Err() },
			[]string{"per-customer uses: customer 3: redis users 1, database voucher_customer_usage 0"}},
		{"user missing in redis", func(code string, k []string) error { return rdb.HDel(ctx, k[1], "1").Err() },
			[]string{"per-customer uses: customer 1: redis users 0, database voucher_customer_usage 2"}},
		{"discount", func(code string, k []string) error { return rdb.HSet(ctx, k[3], "discountAmount", "400").Err() },
			[]string{"terms: discountAmount: redis 400, database 500"}},
		{"per-user limit and pause", func(code string, k []string) error {
			return rdb.HSet(ctx, k[3], "perUserLimit", "3", "paused", "1").Err()
		}, []string{"terms: perUserLimit: redis 3, database 2", "terms: paused: redis true, database false"}},
		{"window", func(code string, k []string) error {
			_, err := db.Exec(ctx, `UPDATE voucher SET ends_at = ends_at + interval '1 second' WHERE code = $1`, code)
			return err
		}, []string{"terms: endsAt (unix ms): redis "}},
		{"total limit", func(code string, k []string) error {
			_, err := db.Exec(ctx, `UPDATE voucher SET total_limit = 12 WHERE code = $1`, code)
			return err
		}, []string{"remaining: redis 7, database total_limit 12 - used_count 3 = 9", "terms: totalLimit: redis 10, database 12"}},
		{"used_count against the rows", func(code string, k []string) error {
			_, err := db.Exec(ctx, `UPDATE voucher SET used_count = 4 WHERE code = $1`, code)
			return err
		}, []string{"database: used_count 4, 3 active (RESERVED, CONFIRMED) rows",
			"remaining: redis 7, database total_limit 10 - used_count 4 = 6"}},
		{"usage against the rows", func(code string, k []string) error {
			_, err := db.Exec(ctx, `UPDATE voucher_customer_usage SET used_count = 1 WHERE voucher_code = $1 AND customer_id = 1`, code)
			return err
		}, []string{"database: customer 1: 2 active rows, voucher_customer_usage 1",
			"per-customer uses: customer 1: redis users 2, database voucher_customer_usage 1"}},
		{"not loaded", func(code string, k []string) error { return rdb.Del(ctx, k...).Err() },
			[]string{agreement.NotLoaded}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code := sale(t, rdb, db)
			require.NoError(t, tc.corrupt(code, gate.Keys(code)))
			d, err := agreement.Compare(ctx, rdb, db, code)
			require.NoError(t, err)
			require.Equal(t, code, d.Code)
			require.Len(t, d.Problems, len(tc.want), "Compare(%s) = %v", code, d)
			for i, w := range tc.want {
				if strings.Contains(w, "%s") {
					w = fmt.Sprintf(w, code)
				}
				require.True(t, strings.HasPrefix(d.Problems[i], w), "problem %d = %q, want %q", i, d.Problems[i], w)
			}
			require.False(t, d.OK())
			require.Equal(t, tc.name == "not loaded", d.Unloaded())
			require.Contains(t, d.String(), d.Problems[0])
		})
	}
}

func TestCompareUnknownVoucher(t *testing.T) {
	rdb, db := servers(t)
	_, err := agreement.Compare(context.Background(), rdb, db, "agree-no-such-voucher")
	require.ErrorContains(t, err, "no such voucher")
}

// recorder is a testing.TB that keeps what RequireAgreement reports.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func TestRequireAgreementReportsEveryDiff(t *testing.T) {
	rdb, db := servers(t)
	ctx := context.Background()
	a, b, good := sale(t, rdb, db), sale(t, rdb, db), sale(t, rdb, db)
	require.NoError(t, rdb.IncrBy(ctx, gate.Keys(a)[0], 1).Err())
	require.NoError(t, rdb.Del(ctx, gate.Keys(b)...).Err())

	rec := &recorder{TB: t}
	agreementtest.RequireAgreement(rec, rdb, db, a, b, good)
	require.Len(t, rec.errors, 1)
	require.Contains(t, rec.errors[0], a+": redis and postgres disagree")
	require.Contains(t, rec.errors[0], "remaining: redis 8")
	require.Contains(t, rec.errors[0], b+": redis and postgres disagree:\n\t"+agreement.NotLoaded)
	require.NotContains(t, rec.errors[0], good)

	rec = &recorder{TB: t}
	agreementtest.RequireAgreementOrUnloaded(rec, rdb, db, b, good)
	require.Empty(t, rec.errors)
}

// TestRequireAgreementWaitsForQuiescence: a difference that a background step
// closes within the wait is not a failure.
func TestRequireAgreementWaitsForQuiescence(t *testing.T) {
	rdb, db := servers(t)
	ctx := context.Background()
	code := sale(t, rdb, db)
	require.NoError(t, rdb.IncrBy(ctx, gate.Keys(code)[0], 1).Err())
	fixed := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		fixed <- rdb.IncrBy(ctx, gate.Keys(code)[0], -1).Err()
	}()
	agreementtest.RequireAgreement(t, rdb, db, code)
	require.NoError(t, <-fixed)
}
