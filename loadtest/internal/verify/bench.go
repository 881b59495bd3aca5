package verify

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/loadtest/internal/stack"
	"github.com/flashgate/flashgate/shared/agreement"
	"github.com/flashgate/flashgate/shared/client"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Bench is what bursts run against: URL takes the reserves; the ledger creates
// vouchers; the database and Redis are read directly to check the outcome. A
// Bench without a database (the ceiling server) is only hammered, not checked.
type Bench struct {
	URL       string
	LedgerURL string
	Token     string

	db     *pgxpool.Pool
	rdb    redis.UniversalClient
	gate   *gate.Gate
	ledger *client.Client // the admin calls, with Token
}

// OpenBench connects to e's database and Redis.
func OpenBench(ctx context.Context, e stack.Endpoints) (*Bench, error) {
	var missing []string
	for _, u := range []struct{ what, url string }{{"proxy", e.ProxyURL}, {"ledger", e.LedgerURL}, {"database", e.DBURL}, {"Redis", e.RedisURL}} {
		if u.url == "" {
			missing = append(missing, u.what)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("the proxy, ledger, database and Redis URLs are all needed to check a burst; missing: %s", strings.Join(missing, ", "))
	}
	db, err := pgxpool.New(ctx, e.DBURL)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	if err := db.Ping(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("database: %w", err)
	}
	rdb, err := gate.NewClient(e.RedisURL, gate.ClientOptions{Timeout: 5 * time.Second})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("redis: %w", err)
	}
	return &Bench{
		URL: e.ProxyURL, LedgerURL: e.LedgerURL, Token: e.Token,
		db: db, rdb: rdb, gate: gate.New(rdb), ledger: client.New(e.LedgerURL, client.WithToken(e.Token), client.WithHTTPClient(&http.Client{Timeout: 30 * time.Second})),
	}, nil
}

// BareBench hammers url and checks nothing: for the ceiling server.
func BareBench(url string) *Bench { return &Bench{URL: url} }

// WithURL returns a Bench that sends reserves to url (another proxy in front of
// the same ledger) and shares b's connections.
func (b *Bench) WithURL(url string) *Bench {
	c := *b
	c.URL = url
	return &c
}

// Close closes the connections of a Bench returned by OpenBench.
func (b *Bench) Close() {
	if b.db != nil {
		b.db.Close()
	}
	if b.rdb != nil {
		b.rdb.Close()
	}
}

// Checked reports whether bursts on b can be checked against the database.
func (b *Bench) Checked() bool { return b.db != nil }

var codeSeq atomic.Int64

// NextSeq is the next number of the sequence that makes codes (and the chaos
// scenarios' database names) unique in this process.
func NextSeq() int64 { return codeSeq.Add(1) }

// NewCode returns a voucher code no earlier run used: prefix, the time in base
// 36 and a sequence number (at most 32 characters for a short prefix).
func NewCode(prefix string) string {
	return fmt.Sprintf("%s-%s-%d", prefix, strconv.FormatInt(time.Now().UnixNano(), 36), NextSeq())
}

// VoucherSpec is the voucher a burst sells.
type VoucherSpec struct {
	Code           string
	Stock, PerUser int
	Flash          bool
	WritePath      string // voucher.WritePathLog for Approach B; empty: the ledger's default (sync)
}

// CreateVoucher creates v through the ledger's admin route, valid from an hour
// ago for a day, and for a flash voucher makes sure Redis holds it.
func (b *Bench) CreateVoucher(ctx context.Context, v VoucherSpec) error {
	now := time.Now().UTC().Truncate(time.Second)
	start, end := now.Add(-time.Hour), now.Add(24*time.Hour)
	discount, minOrder := int64(load.DiscountAmount), int64(load.MinOrderAmount)
	nv := voucher.NewVoucher{Code: &v.Code, DiscountAmount: &discount, MinOrderAmount: &minOrder,
		TotalLimit: &v.Stock, PerUserLimit: &v.PerUser, FlashSale: &v.Flash, StartsAt: &start, EndsAt: &end}
	if v.WritePath != "" {
		nv.WritePath = &v.WritePath
	}
	if _, err := b.ledger.CreateVoucher(ctx, nv); err != nil {
		return fmt.Errorf("create voucher %s: %w", v.Code, err)
	}
	if !v.Flash {
		return nil
	}
	if _, loaded, err := b.gate.State(ctx, v.Code); err != nil {
		return err
	} else if loaded {
		return nil
	}
	if err := b.ledger.Warmup(ctx, v.Code); err != nil {
		return fmt.Errorf("warm up voucher %s: %w", v.Code, err)
	}
	return nil
}

// StatementsSetting is the Postgres setting Statements needs: the server
// loads pg_stat_statements at start.
const StatementsSetting = "shared_preload_libraries=pg_stat_statements"

// CountStatements creates the pg_stat_statements extension in the bench's
// database, for Statements; the server must run with StatementsSetting.
func (b *Bench) CountStatements(ctx context.Context) error {
	if _, err := b.db.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return fmt.Errorf("count statements (the server needs %s): %w", StatementsSetting, err)
	}
	return nil
}

// Statements counts the statements every client has run in the bench's
// database (pg_stat_statements; see CountStatements), the ledger's and the
// bench's own included. Each is counted as it ends: pg_stat_database's
// commits, by contrast, show a busy backend's work up to 10 s late (Postgres
// 15's PGSTAT_IDLE_INTERVAL).
func (b *Bench) Statements(ctx context.Context) (int64, error) {
	var n int64
	err := b.db.QueryRow(ctx, `
		SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	return n, nil
}

// Commits reads pg_stat_database.xact_commit for the database: every committed
// transaction of every client, the ledger's included.
func (b *Bench) Commits(ctx context.Context) (int64, error) {
	var n int64
	err := b.db.QueryRow(ctx,
		`SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read xact_commit: %w", err)
	}
	return n, nil
}

// UsedCount reads code's used_count in the database.
func (b *Bench) UsedCount(ctx context.Context, code string) (int, error) {
	var n int
	if err := b.db.QueryRow(ctx, `SELECT used_count FROM voucher WHERE code = $1`, code).Scan(&n); err != nil {
		return 0, fmt.Errorf("read used_count of %s: %w", code, err)
	}
	return n, nil
}

// WaitUsed polls code's used_count until it reaches want (a log voucher's
// consumer wrote every admission answered 201) and returns how long that
// took, or an error when it did not within timeout.
func (b *Bench) WaitUsed(ctx context.Context, code string, want int, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		n, err := b.UsedCount(ctx, code)
		if err != nil {
			return time.Since(start), err
		}
		if n >= want {
			return time.Since(start), nil
		}
		if time.Since(start) > timeout {
			return time.Since(start), fmt.Errorf("%s: used_count %d after %s, want %d", code, n, timeout, want)
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		}
	}
}

// DBState is a voucher as the database sees it.
type DBState struct {
	TotalLimit, Used, PerUser int
	ByStatus                  map[string]int   // voucher_redemption rows by status
	Active                    map[string]int64 // RESERVED and CONFIRMED rows: orderId -> customer
	MaxUsage                  int              // largest voucher_customer_usage.used_count
}

// DBState reads code's voucher row, its redemption rows and its customer counts.
func (b *Bench) DBState(ctx context.Context, code string) (DBState, error) {
	d := DBState{ByStatus: map[string]int{}, Active: map[string]int64{}}
	err := b.db.QueryRow(ctx, `
		SELECT total_limit, used_count, per_user_limit,
		       coalesce((SELECT max(used_count) FROM voucher_customer_usage WHERE voucher_code = $1), 0)
		FROM voucher WHERE code = $1`, code).Scan(&d.TotalLimit, &d.Used, &d.PerUser, &d.MaxUsage)
	if err != nil {
		return d, fmt.Errorf("read voucher %s: %w", code, err)
	}
	rows, err := b.db.Query(ctx,
		`SELECT order_id, customer_id, status FROM voucher_redemption WHERE voucher_code = $1`, code)
	if err != nil {
		return d, fmt.Errorf("read redemptions of %s: %w", code, err)
	}
	defer rows.Close()
	for rows.Next() {
		var order, status string
		var customer int64
		if err := rows.Scan(&order, &customer, &status); err != nil {
			return d, fmt.Errorf("read redemptions of %s: %w", code, err)
		}
		d.ByStatus[status]++
		if status == "RESERVED" || status == "CONFIRMED" {
			d.Active[order] = customer
		}
	}
	if err := rows.Err(); err != nil {
		return d, fmt.Errorf("read redemptions of %s: %w", code, err)
	}
	return d, nil
}

// Outcome reads spec's voucher back after a burst, from the database and, for
// a flash voucher, from Redis, beside what the clients were told.
func (b *Bench) Outcome(ctx context.Context, spec VoucherSpec, plan load.Plan, shots []load.Shot) (Outcome, error) {
	o := Outcome{Spec: spec, Plan: plan, Shots: shots}
	for _, s := range shots {
		if s.Failed() {
			o.Errors++
		}
	}
	var err error
	if o.DB, err = b.DBState(ctx, spec.Code); err != nil {
		return o, err
	}
	if !spec.Flash {
		return o, nil
	}
	st, loaded, err := b.RedisState(ctx, spec.Code)
	if err != nil {
		return o, err
	}
	if loaded {
		o.Redis = &st
	}
	return o, nil
}

// Summary is d as a report shows it.
func (d DBState) Summary() *DBSummary {
	return &DBSummary{TotalLimit: d.TotalLimit, Used: d.Used, Active: len(d.Active),
		Remaining: d.TotalLimit - d.Used, ByStatus: d.ByStatus}
}

// RedisState reads code's counter and admitted orders from the gate.
func (b *Bench) RedisState(ctx context.Context, code string) (gate.State, bool, error) {
	return b.gate.State(ctx, code)
}

// CommitsSince waits for the backends to publish their counters and returns
// the commits since before, per admitted order.
func (b *Bench) CommitsSince(ctx context.Context, before int64, wait time.Duration, admitted int) (*Commits, error) {
	select {
	case <-time.After(wait):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	after, err := b.Commits(ctx)
	if err != nil {
		return nil, err
	}
	// The delta holds the harness's own read-only transactions too: the
	// first xact_commit read and the two reads of DBState.
	const harnessReads = 3
	c := &Commits{Delta: max(after-before-harnessReads, 0), WaitedSeconds: wait.Seconds()}
	if admitted > 0 {
		c.PerAdmitted = float64(c.Delta) / float64(admitted)
	}
	return c, nil
}

// UsageMismatches counts the customers of a voucher whose use count differs
// from their RESERVED and CONFIRMED rows: a retry that took a second use
// would show here.
func (b *Bench) UsageMismatches(ctx context.Context, code string) (int, error) {
	var n int
	err := b.db.QueryRow(ctx, `
		SELECT count(*) FROM (
			SELECT customer_id, used_count FROM voucher_customer_usage
			WHERE voucher_code = $1 AND used_count > 0
		) u FULL JOIN (
			SELECT customer_id, count(*)::int AS n FROM voucher_redemption
			WHERE voucher_code = $1 AND status IN ('RESERVED', 'CONFIRMED') GROUP BY customer_id
		) r USING (customer_id)
		WHERE coalesce(u.used_count, 0) <> coalesce(r.n, 0)`, code).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("compare customer counts of %s: %w", code, err)
	}
	return n, nil
}

// RedemptionStatuses reads the status of each of code's redemption rows, by
// orderId.
func (b *Bench) RedemptionStatuses(ctx context.Context, code string) (map[string]string, error) {
	rows, err := b.db.Query(ctx, `SELECT order_id, status FROM voucher_redemption WHERE voucher_code = $1`, code)
	if err != nil {
		return nil, fmt.Errorf("read redemptions of %s: %w", code, err)
	}
	statuses := map[string]string{}
	for rows.Next() {
		var id, st string
		if err := rows.Scan(&id, &st); err != nil {
			rows.Close()
			return nil, err
		}
		statuses[id] = st
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return statuses, nil
}

// Agreement compares what Redis and the database hold for code.
func (b *Bench) Agreement(ctx context.Context, code string) (agreement.Diff, error) {
	return agreement.Compare(ctx, b.rdb, b.db, code)
}

// Repairs reads the database's reconcile audit of codes.
func (b *Bench) Repairs(ctx context.Context, codes ...string) ([]string, error) {
	return agreement.Repairs(ctx, b.db, codes...)
}

// Warmup asks the ledger to load code's flash voucher into Redis.
func (b *Bench) Warmup(ctx context.Context, code string) error {
	return b.ledger.Warmup(ctx, code)
}
