package ledgertest

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

// OwnPostgres returns the URL of a PostgreSQL only this test uses. The sweeper
// releases every expired reservation in its database, so tests that sweep get
// their own instead of taking rows from tests running beside them.
func OwnPostgres(tb testing.TB) string {
	tb.Helper()
	return devstacktest.NewPostgres(tb, devstack.PostgresOptions{}).URL()
}

// Claim is one reserve request of a test: a customer and an orderId.
type Claim struct {
	Customer int64
	Order    string
}

// Claims returns customers x perCustomer claims for code, orderIds tagged with
// round so that a later round never reuses one.
func Claims(code string, customers, perCustomer int, round string) []Claim {
	var out []Claim
	for c := 1; c <= customers; c++ {
		for o := 0; o < perCustomer; o++ {
			out = append(out, Claim{Customer: int64(c), Order: fmt.Sprintf("%s-%s-c%d-o%d", code, round, c, o)})
		}
	}
	return out
}

// ReserveAll reserves every claim concurrently through ledger URL base and
// requires a 201 for each. A 503 is retried with the same orderId, as the
// API tells a client to: on a loaded machine a write can pass DB_TIMEOUT.
func ReserveAll(tb testing.TB, base, code string, cs []Claim) {
	tb.Helper()
	replies := make([]Reply, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() {
			replies[i] = ReserveRetrying(tb, base, code, ClaimBody(c.Customer, c.Order, 5_000))
		})
	}
	wg.Wait()
	for i, r := range replies {
		require.Equal(tb, http.StatusCreated, r.Status, "Reserve(%v) = %d %s, want 201", cs[i], r.Status, r.Raw)
	}
}

// ReserveRetrying posts body to code's reservations at ledger URL base until
// the answer is not 503 (at most 20 tries, 50 ms apart), and returns it.
func ReserveRetrying(tb testing.TB, base, code string, body any) Reply {
	tb.Helper()
	var r Reply
	for range 20 {
		if r = Call(tb, http.MethodPost, base+"/vouchers/"+code+"/reservations", "", body); r.Status != http.StatusServiceUnavailable {
			return r
		}
		time.Sleep(50 * time.Millisecond)
	}
	return r
}

// Eventually polls cond every 20ms until it holds or timeout passes.
func Eventually(tb testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("after %s: "+format, append([]any{timeout}, args...)...)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitExpired waits until every RESERVED reservation of code has expired on
// the database's clock, the one the sweeper goes by.
func (l *Ledger) WaitExpired(tb testing.TB, code string) {
	tb.Helper()
	Eventually(tb, 10*time.Second, func() bool {
		var live int
		require.NoError(tb, l.Pool.QueryRow(context.Background(), `
			SELECT count(*) FROM voucher_redemption
			WHERE voucher_code = $1 AND status = 'RESERVED' AND expires_at >= now()`, code).Scan(&live))
		return live == 0
	}, "reservations of %s still live", code)
}

// Statuses returns each reservation's status by orderId.
func (l *Ledger) Statuses(tb testing.TB, code string) map[string]string {
	tb.Helper()
	rows, err := l.Pool.Query(context.Background(),
		`SELECT order_id, status FROM voucher_redemption WHERE voucher_code = $1`, code)
	require.NoError(tb, err)
	out := map[string]string{}
	var id, st string
	_, err = pgx.ForEachRow(rows, []any{&id, &st}, func() error { out[id] = st; return nil })
	require.NoError(tb, err)
	return out
}

// Books is one voucher's accounts as the database keeps them.
type Books struct {
	Total, Used int
	Status      map[string]int   // RESERVED, CONFIRMED, RELEASED -> rows
	Active      map[int64]int    // customer -> RESERVED + CONFIRMED rows
	Usage       map[int64]int    // customer -> voucher_customer_usage.used_count
	Orders      map[string]int64 // active orderId -> customer
}

func (b Books) ActiveOrders() int { return b.Status["RESERVED"] + b.Status["CONFIRMED"] }

func (b Books) Remaining() int64 { return int64(b.Total - b.Used) }

// Books reads code's counters, rows and per-customer counts in one snapshot.
func (l *Ledger) Books(tb testing.TB, code string) Books {
	tb.Helper()
	b := Books{Status: map[string]int{}, Active: map[int64]int{}, Usage: map[int64]int{}, Orders: map[string]int64{}}
	ctx := context.Background()
	err := pgx.BeginTxFunc(ctx, l.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, `SELECT total_limit, used_count FROM voucher WHERE code = $1`, code).
				Scan(&b.Total, &b.Used); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, `SELECT order_id, customer_id, status FROM voucher_redemption WHERE voucher_code = $1`, code)
			if err != nil {
				return err
			}
			var id, st string
			var c int64
			if _, err := pgx.ForEachRow(rows, []any{&id, &c, &st}, func() error {
				b.Status[st]++
				if st == "RESERVED" || st == "CONFIRMED" {
					b.Active[c]++
					b.Orders[id] = c
				}
				return nil
			}); err != nil {
				return err
			}
			rows, err = tx.Query(ctx, `SELECT customer_id, used_count FROM voucher_customer_usage WHERE voucher_code = $1`, code)
			if err != nil {
				return err
			}
			var n int
			_, err = pgx.ForEachRow(rows, []any{&c, &n}, func() error { b.Usage[c] = n; return nil })
			return err
		})
	require.NoError(tb, err)
	return b
}

// CheckBooks asserts that the database's counters agree with its rows:
// used_count is the number of active reservations, never negative nor above
// the limit, and each customer's count is its number of active reservations.
// It returns the books.
func (l *Ledger) CheckBooks(tb testing.TB, code string) Books {
	tb.Helper()
	b := l.Books(tb, code)
	assert.Equal(tb, b.ActiveOrders(), b.Used, "%s: used_count = %d, want the %d active rows (%v)", code, b.Used, b.ActiveOrders(), b.Status)
	assert.GreaterOrEqual(tb, b.Used, 0, "%s: used_count", code)
	assert.LessOrEqual(tb, b.Used, b.Total, "%s: used_count above total_limit", code)
	for c, n := range b.Usage {
		assert.Equal(tb, b.Active[c], n, "%s: customer %d usage = %d, want its %d active rows", code, c, n, b.Active[c])
	}
	for c, n := range b.Active {
		_, ok := b.Usage[c]
		assert.True(tb, ok, "%s: customer %d holds %d rows but has no usage row", code, c, n)
	}
	return b
}

// RedisState reads code's state from Redis and requires it to be loaded.
func RedisState(tb testing.TB, g *gate.Gate, code string) gate.State {
	tb.Helper()
	st, loaded, err := g.State(context.Background(), code)
	require.NoError(tb, err)
	require.True(tb, loaded, "voucher %s is not loaded in redis", code)
	return st
}

// CheckRedisMatches asserts that Redis holds exactly the database's active
// orders of code and as many remaining uses as the database.
func CheckRedisMatches(tb testing.TB, g *gate.Gate, b Books, code string) {
	tb.Helper()
	st := RedisState(tb, g, code)
	assert.Equal(tb, b.Remaining(), st.Remaining, "%s: redis remaining = %d, want db remaining %d", code, st.Remaining, b.Remaining())
	got := map[string]int64{}
	for _, o := range st.Orders {
		got[o.OrderID] = o.CustomerID
	}
	if !assert.Equal(tb, b.Orders, got, "%s: orders held in redis vs active in db", code) {
		tb.Logf("redis orders: %v", sortedKeys(got))
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
