package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/ledger/internal/sale"
	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/voucher"
)

// newWriter returns a Writer over l's store that records batch sizes.
func newWriter(tb testing.TB, l *ledgertest.Ledger) (*sale.Writer, *[]int) {
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	w := sale.NewWriter(ctx, l.Store, 256, 10*time.Second)
	var mu sync.Mutex
	sizes := &[]int{}
	w.ObserveSizes(func(n int) { mu.Lock(); *sizes = append(*sizes, n); mu.Unlock() })
	return w, sizes
}

// writeOne writes one admitted claim through w, as WriteAdmitted does.
func writeOne(w *sale.Writer, code string, cl voucher.Claim) (voucher.Reservation, error) {
	out := w.WriteMany(context.Background(), code, []voucher.Claim{cl})
	return out[0].Reservation, out[0].Err
}

// Many concurrent admitted writes for one voucher: exact counts, grouped into
// few transactions, and the ones past the stock fail alone with OUT_OF_STOCK.
func TestWriterGroupCommitExact(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{NoRedis: true})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 300, 2, true))
	w, sizes := newWriter(t, l)

	const n = 400 // 100 more than the stock: the database's guards refuse them
	var ok, soldOut, other atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := voucher.Claim{CustomerID: int64(i/2 + 1), OrderID: fmt.Sprintf("%s-%d", code, i), OrderAmount: 5_000}
			r, err := writeOne(w, code, cl)
			switch {
			case err == nil && r.OrderID == cl.OrderID && r.Status == voucher.Reserved:
				ok.Add(1)
			case voucher.ErrorCode(err) == voucher.CodeOutOfStock:
				soldOut.Add(1)
			default:
				other.Add(1)
				t.Errorf("Write(%v) = %v, %v", cl, r, err)
			}
		}()
	}
	wg.Wait()
	assert.EqualValues(t, 300, ok.Load())
	assert.EqualValues(t, 100, soldOut.Load())
	assert.Equal(t, ledgertest.DBCounts{Used: 300, Rows: 300, Active: 300, MaxPerCustomer: 2}, l.Counts(t, code))
	t.Logf("%d writes in %d batches %v", n, len(*sizes), *sizes)
	assert.Less(t, len(*sizes), n/2, "writes were not grouped")
}

// A batch holding an item that breaks a guard falls back to item by item:
// only that item fails.
func TestWriterOneBadItemFailsAlone(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{NoRedis: true})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 100, 1, true))
	w, _ := newWriter(t, l)
	// Customer 1 already holds its one use.
	_, err := writeOne(w, code, voucher.Claim{CustomerID: 1, OrderID: code + "-first", OrderAmount: 5_000})
	require.NoError(t, err)

	claims := []voucher.Claim{
		{CustomerID: 2, OrderID: code + "-a", OrderAmount: 5_000},
		{CustomerID: 1, OrderID: code + "-b", OrderAmount: 5_000}, // over its limit
		{CustomerID: 3, OrderID: code + "-c", OrderAmount: 5_000},
		{CustomerID: 4, OrderID: code + "-d", OrderAmount: 10},        // too small
		{CustomerID: 1, OrderID: code + "-first", OrderAmount: 5_000}, // a retry
		{CustomerID: 5, OrderID: code + "-first", OrderAmount: 5_000}, // someone else's order
	}
	out, err := w.WriteBatch(context.Background(), code, claims)
	require.NoError(t, err)
	want := []string{"", voucher.CodeAlreadyUsed, "", voucher.CodeNotEligible, "", voucher.CodeOrderConflict}
	for i, o := range out {
		assert.Equal(t, want[i], voucher.ErrorCode(o.Err), "writeBatch item %d (%v) = %v", i, claims[i], o.Err)
	}
	assert.Equal(t, ledgertest.DBCounts{Used: 3, Rows: 3, Active: 3, MaxPerCustomer: 1}, l.Counts(t, code))
}

// The same new orderId twice in one batch is written once.
func TestWriterSameOrderTwiceInBatch(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{NoRedis: true})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 10, 1, true))
	w, _ := newWriter(t, l)
	cl := voucher.Claim{CustomerID: 1, OrderID: code + "-x", OrderAmount: 5_000}
	out, err := w.WriteBatch(context.Background(), code, []voucher.Claim{cl, cl})
	require.NoError(t, err)
	for _, o := range out {
		require.NoError(t, o.Err)
		assert.Equal(t, cl.OrderID, o.Reservation.OrderID)
	}
	assert.Equal(t, ledgertest.DBCounts{Used: 1, Rows: 1, Active: 1, MaxPerCustomer: 1}, l.Counts(t, code))
}

func BenchmarkWriter(b *testing.B) {
	l := ledgertest.New(b, ledgertest.Options{NoRedis: true})
	code := ledgertest.NewCode(b)
	l.CreateVoucher(b, ledgertest.Spec(code, 10_000_000, 1, true))
	w, sizes := newWriter(b, l)
	var seq atomic.Int64
	b.SetParallelism(64)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := seq.Add(1)
			if _, err := writeOne(w, code, voucher.Claim{CustomerID: i, OrderID: fmt.Sprintf("%s-%d", code, i), OrderAmount: 5_000}); err != nil {
				b.Error(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/float64(max(len(*sizes), 1)), "writes/tx")
}

// The internal batch route answers each claim as the single route would, in
// one request; malformed batches are refused whole and write nothing.
func TestAdmittedBatchRoute(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{Token: "tok"})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 3, 1, true))
	path := "/internal/vouchers/" + code + "/reservations/batch"
	claims := []map[string]any{
		ledgertest.ClaimBody(1, code+"-a", 5_000),
		ledgertest.ClaimBody(1, code+"-a", 5_000), // a retry in the same batch
		ledgertest.ClaimBody(2, code+"-a", 5_000), // the same order, another customer
		ledgertest.ClaimBody(3, code+"-b", 10),    // too small
		ledgertest.ClaimBody(1, code+"-c", 5_000), // customer 1 is at its limit
		ledgertest.ClaimBody(4, code+"-d", 5_000),
	}
	r := l.Call(t, "POST", path, map[string]any{"claims": claims})
	require.Equal(t, 200, r.Status, r.Raw)
	results, _ := r.Body["results"].([]any)
	require.Len(t, results, len(claims))
	want := []struct {
		status   int
		code     string
		replayed bool
	}{{201, "", false}, {201, "", true}, {409, "ORDER_CONFLICT", false}, {422, "NOT_ELIGIBLE", false},
		{409, "ALREADY_USED", false}, {201, "", false}}
	for i, res := range results {
		item := res.(map[string]any)
		body, _ := item["body"].(map[string]any)
		got, _ := body["error"].(string)
		assert.EqualValues(t, want[i].status, item["status"], "claim %d: %v", i, item)
		assert.Equal(t, want[i].code, got, "claim %d", i)
		_, has := item["replayed"]
		assert.Equal(t, want[i].replayed, has, "claim %d: replayed present only on a replay: %v", i, item)
	}
	// The whole batch again: every 201 is now a replay.
	r = l.Call(t, "POST", path, map[string]any{"claims": claims[:2]})
	require.Equal(t, 200, r.Status, r.Raw)
	for i, res := range r.Body["results"].([]any) {
		item := res.(map[string]any)
		assert.EqualValues(t, 201, item["status"], "retry %d: %v", i, item)
		assert.Equal(t, true, item["replayed"], "retry %d: %v", i, item)
	}
	assert.Equal(t, ledgertest.DBCounts{Used: 2, Rows: 2, Active: 2, MaxPerCustomer: 1}, l.Counts(t, code))

	tooMany := make([]map[string]any, api.MaxBatchClaims+1)
	for i := range tooMany {
		tooMany[i] = ledgertest.ClaimBody(int64(100+i), fmt.Sprintf("%s-m%d", code, i), 5_000)
	}
	for name, body := range map[string]any{
		"empty":                    map[string]any{"claims": []any{}},
		"too many":                 map[string]any{"claims": tooMany},
		"bad claim":                map[string]any{"claims": []any{map[string]any{"customerId": 0, "orderId": "x", "orderAmount": 1}}},
		"not a batch":              ledgertest.ClaimBody(5, code+"-e", 5_000),
		"a claim with a key twice": json.RawMessage(`{"claims":[{"customerId":5,"customerId":6,"orderId":"` + code + `-f","orderAmount":5000}]}`),
	} {
		r := l.Call(t, "POST", path, body)
		assert.Equal(t, 400, r.Status, "%s: %s", name, r.Raw)
		assert.Equal(t, "INVALID_REQUEST", r.Code(), name)
	}
	assert.Equal(t, ledgertest.DBCounts{Used: 2, Rows: 2, Active: 2, MaxPerCustomer: 1}, l.Counts(t, code))
	r = ledgertest.Call(t, "POST", l.URL+path, "", map[string]any{"claims": claims})
	assert.Equal(t, 401, r.Status, "the batch route needs the token")
}

// A group commit is one statement: when a guard fires it raises, and none of
// its rows stays (redemptions, customers' counts, used_count, events); the
// error names the guard that fired.
func TestGroupCommitRefusedWritesNothing(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{NoRedis: true})
	ctx := context.Background()
	type tally struct {
		ledgertest.DBCounts
		Usage, Events int
	}
	tallyOf := func(code string) tally {
		tl := tally{DBCounts: l.Counts(t, code)}
		require.NoError(t, l.Pool.QueryRow(ctx, `
			SELECT (SELECT coalesce(sum(used_count), 0) FROM voucher_customer_usage WHERE voucher_code = $1),
			       (SELECT count(*) FROM voucher_event WHERE voucher_code = $1)`, code).Scan(&tl.Usage, &tl.Events))
		return tl
	}
	for _, tc := range []struct {
		name   string
		stock  int
		pause  bool
		claims func(code string) []voucher.Claim
		want   error
	}{
		{"over the stock", 2, false, func(code string) []voucher.Claim {
			return []voucher.Claim{{CustomerID: 2, OrderID: code + "-a", OrderAmount: 5_000},
				{CustomerID: 3, OrderID: code + "-b", OrderAmount: 5_000}, {CustomerID: 4, OrderID: code + "-c", OrderAmount: 5_000}}
		}, voucher.ErrOutOfStock},
		{"a customer over its limit", 10, false, func(code string) []voucher.Claim {
			return []voucher.Claim{{CustomerID: 2, OrderID: code + "-a", OrderAmount: 5_000},
				{CustomerID: 1, OrderID: code + "-b", OrderAmount: 5_000}}
		}, voucher.ErrAlreadyUsed},
		{"paused", 10, true, func(code string) []voucher.Claim {
			return []voucher.Claim{{CustomerID: 2, OrderID: code + "-a", OrderAmount: 5_000}}
		}, voucher.ErrPaused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code := ledgertest.NewCode(t)
			l.CreateVoucher(t, ledgertest.Spec(code, tc.stock, 1, true))
			v, err := l.Store.Terms(ctx, code)
			require.NoError(t, err)
			out, refused, err := l.Store.InsertMany(ctx, v, []voucher.Claim{{CustomerID: 1, OrderID: code + "-first", OrderAmount: 5_000}})
			require.NoError(t, err)
			require.False(t, refused)
			require.NoError(t, out[0].Err)
			if tc.pause {
				_, err := l.Pool.Exec(ctx, `UPDATE voucher SET paused = true WHERE code = $1`, code)
				require.NoError(t, err)
			}
			before := tallyOf(code)

			_, err = l.Store.GroupCommit(ctx, l.Pool, v, tc.claims(code))
			assert.Equal(t, tc.want, store.Translate(err))
			_, refused, err = l.Store.InsertMany(ctx, v, tc.claims(code))
			require.NoError(t, err)
			assert.True(t, refused)
			assert.Equal(t, before, tallyOf(code), "a refused group commit left rows behind")
		})
	}
}

// ledgerConn returns a test ledger without Redis and one of its pooled
// connections, released when the test ends.
func ledgerConn(t *testing.T) (*ledgertest.Ledger, *pgxpool.Conn) {
	l := ledgertest.New(t, ledgertest.Options{NoRedis: true})
	c, err := l.Pool.Acquire(context.Background())
	require.NoError(t, err)
	t.Cleanup(c.Release)
	return l, c
}

// TestPrimeWritesNothing: priming a connection (Store.Warm, at start)
// prepares the group commit and the terms read on it and writes no row.
func TestPrimeWritesNothing(t *testing.T) {
	t.Parallel()
	l, c := ledgerConn(t)
	ctx := context.Background()
	require.NoError(t, l.Store.Prime(ctx, c.Conn()))

	var prepared int
	require.NoError(t, c.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE statement IN ($1, $2)`,
		store.GroupCommitSQL, store.TermsSQL).Scan(&prepared))
	require.Equal(t, 2, prepared, "both statements are prepared on the connection")
	var written int
	require.NoError(t, c.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM voucher_redemption WHERE voucher_code = '')
		     + (SELECT count(*) FROM voucher_customer_usage WHERE voucher_code = '')
		     + (SELECT count(*) FROM voucher_event WHERE voucher_code = '')`).Scan(&written))
	require.Zero(t, written)
}

// TestOrderLookupsProbeTheIndex: the statements that read orders by a list of
// orderIds probe the order_id index even in the plan Postgres makes when the
// table is empty and keeps for the connection (a generic plan of a prepared
// statement, as pgx prepares them). "order_id = ANY($1)" got a scan of the
// whole table there, which every group commit holding a retry then ran.
func TestOrderLookupsProbeTheIndex(t *testing.T) {
	t.Parallel()
	_, c := ledgerConn(t)
	ctx := context.Background()
	defer c.Conn().Close(ctx) // its temporary table and settings go with it (before the release)
	// An empty, never analyzed voucher_redemption that shadows the real one
	// in this connection (pg_temp comes first in the search path).
	_, err := c.Exec(ctx, `CREATE TEMP TABLE voucher_redemption (LIKE public.voucher_redemption INCLUDING ALL)`)
	require.NoError(t, err)
	_, err = c.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)

	plan := func(name, sql, args string) string {
		_, err := c.Exec(ctx, "PREPARE "+name+" AS "+sql)
		require.NoError(t, err, name)
		rows, err := c.Query(ctx, "EXPLAIN EXECUTE "+name+args)
		require.NoError(t, err, name)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err, name)
		return strings.Join(lines, "\n")
	}
	// The check sees the scan it guards against.
	require.Contains(t, plan("scan_all", `SELECT order_id FROM voucher_redemption WHERE order_id = ANY($1::text[])`, `('{a,b}')`),
		"Seq Scan on voucher_redemption")
	for name, tc := range map[string]struct{ sql, args string }{
		"group_commit": {store.GroupCommitSQL, `('c', '{1,2}', '{a,b}', 1, '{1,1}', '{1,1}', true)`},
		"orders_in":    {store.OrdersInSQL, `('{a,b}')`},
		"active_of":    {store.ActiveOfSQL, `('c', '{a,b}')`},
	} {
		p := plan(name, tc.sql, tc.args)
		assert.NotContains(t, p, "Seq Scan on voucher_redemption", "%s:\n%s", name, p)
		assert.Contains(t, p, "voucher_redemption_order_id", "%s probes the order_id index:\n%s", name, p)
	}
}

// TestRedemptionIndexes: a written reservation maintains the indexes its table
// needs and no other (each is paid for by every admitted row): the primary
// key, the orderId's uniqueness, the sweeper's expiry and a voucher's rows by
// id (which the reads of a voucher's rows by status use too).
func TestRedemptionIndexes(t *testing.T) {
	t.Parallel()
	_, c := ledgerConn(t)
	rows, err := c.Query(context.Background(),
		`SELECT indexname FROM pg_indexes WHERE schemaname = 'public' AND tablename = 'voucher_redemption' ORDER BY indexname`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	assert.Equal(t, []string{"ix_redemption_expiry", "ix_redemption_voucher_id", "uq_order", "voucher_redemption_pkey"}, names)
}
