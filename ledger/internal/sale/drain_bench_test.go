package sale_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/admissions"
	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/voucher"
)

// BenchmarkLogPathDrain: one op is a backlog of 100 writePath log vouchers'
// 30 admissions each (3,000 records, interleaved as a sale of many vouchers
// at once) in one partition, produced while no consumer runs, then written
// by a consumer started for it: the time from its first row to its last, and
// the transactions that wrote them (transactions/op). BENCH_DURABLE_PG=1 runs
// it on a Postgres of its own with fsync on, as in production.
//
//	go test -run '^$' -bench LogPathDrain -benchtime 5x ./ledger/
func BenchmarkLogPathDrain(b *testing.B) {
	const vouchers, each = 100, 30
	k := ledgertest.NewKafka(b, 1)
	o := ledgertest.Options{Kafka: k.ListenAddrs()}
	if os.Getenv("BENCH_DURABLE_PG") != "" {
		pg, err := devstack.StartPostgres(devstack.PostgresOptions{Durable: true})
		require.NoError(b, err)
		b.Cleanup(func() { _ = pg.Stop() })
		o.DB = pg.URL()
	}
	l := ledgertest.New(b, o)
	p, err := admissions.NewProducer(k.ListenAddrs(), admissions.DefaultTopic, time.Now)
	require.NoError(b, err)
	b.Cleanup(p.Close)
	var drain time.Duration
	txs := 0
	for range b.N {
		codes := logVouchers(l, b, vouchers, each)
		for n := range each {
			for _, code := range codes {
				cl := voucher.Claim{CustomerID: int64(n + 1), OrderID: fmt.Sprintf("%s-%d", code, n), OrderAmount: 5_000}
				now := time.Now()
				rec := store.Logged{Claim: cl, DiscountAmount: 500, AdmittedAt: now, ExpiresAt: now.Add(15 * time.Minute)}
				require.NoError(b, p.Append(context.Background(), code, []store.Logged{rec})[0])
			}
		}
		stop := l.Consume(b)
		drain += waitWritten(l, b, codes, vouchers*each)
		stop()
		txs += transactions(l, b, codes...)
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(drain.Seconds()/float64(b.N), "s-to-write/op")
	b.ReportMetric(float64(txs)/float64(b.N), "transactions/op")
}

// waitWritten waits until codes' used_counts add up to want and returns the
// time from the first use written to the last.
func waitWritten(l *ledgertest.Ledger, tb testing.TB, codes []string, want int) time.Duration {
	tb.Helper()
	var first time.Time
	deadline := time.Now().Add(time.Minute)
	for {
		var used int
		require.NoError(tb, l.Pool.QueryRow(context.Background(),
			`SELECT coalesce(sum(used_count), 0) FROM voucher WHERE code = ANY($1)`, codes).Scan(&used))
		if used > 0 && first.IsZero() {
			first = time.Now()
		}
		if used == want {
			return time.Since(first)
		}
		require.True(tb, time.Now().Before(deadline), "%d of %d admissions written after a minute", used, want)
		time.Sleep(2 * time.Millisecond)
	}
}

// logVouchers creates n writePath log vouchers of limit uses each (one per
// customer), in Redis too.
func logVouchers(l *ledgertest.Ledger, tb testing.TB, n, limit int) []string {
	tb.Helper()
	codes := make([]string, n)
	for i := range codes {
		codes[i] = ledgertest.NewCode(tb)
		r := l.Call(tb, http.MethodPost, "/admin/vouchers", ledgertest.PathSpec{VoucherSpec: ledgertest.Spec(codes[i], limit, 1, true), WritePath: "log"})
		require.Equal(tb, http.StatusCreated, r.Status, r.Raw)
		l.Checks.AddFlash(codes[i])
	}
	return codes
}

// transactions is how many transactions wrote the rows of codes.
func transactions(l *ledgertest.Ledger, tb testing.TB, codes ...string) int {
	tb.Helper()
	var n int
	require.NoError(tb, l.Pool.QueryRow(context.Background(),
		`SELECT count(DISTINCT xmin::text) FROM voucher_redemption WHERE voucher_code = ANY($1)`, codes).Scan(&n))
	return n
}
