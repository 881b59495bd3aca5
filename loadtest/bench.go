package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/shared/client"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/voucher"
)

// The money terms of every voucher the harness creates; orders are above the
// minimum so that every request is eligible.
const (
	discountAmount = 100_000
	minOrderAmount = 500_000
	orderAmount    = 750_000
)

// Endpoints locate a running flashgate.
type Endpoints struct {
	ProxyURL, LedgerURL string
	DBURL, RedisURL     string
	Token               string // the ledger's admin token
}

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
func OpenBench(ctx context.Context, e Endpoints) (*Bench, error) {
	if e.ProxyURL == "" || e.LedgerURL == "" || e.DBURL == "" || e.RedisURL == "" {
		return nil, errors.New("the proxy, ledger, database and Redis URLs are all needed to check a burst")
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

// checked reports whether bursts on b can be checked against the database.
func (b *Bench) checked() bool { return b.db != nil }

var codeSeq atomic.Int64

// newCode returns a voucher code no earlier run used: prefix, the time in base
// 36 and a sequence number (at most 32 characters for a short prefix).
func newCode(prefix string) string {
	return fmt.Sprintf("%s-%s-%d", prefix, strconv.FormatInt(time.Now().UnixNano(), 36), codeSeq.Add(1))
}

// VoucherSpec is the voucher a burst sells.
type VoucherSpec struct {
	Code           string
	Stock, PerUser int
	Flash          bool
}

// CreateVoucher creates v through the ledger's admin route, valid from an hour
// ago for a day, and for a flash voucher makes sure Redis holds it.
func (b *Bench) CreateVoucher(ctx context.Context, v VoucherSpec) error {
	now := time.Now().UTC().Truncate(time.Second)
	start, end := now.Add(-time.Hour), now.Add(24*time.Hour)
	discount, minOrder := int64(discountAmount), int64(minOrderAmount)
	if _, err := b.ledger.CreateVoucher(ctx, voucher.NewVoucher{Code: &v.Code, DiscountAmount: &discount, MinOrderAmount: &minOrder,
		TotalLimit: &v.Stock, PerUserLimit: &v.PerUser, FlashSale: &v.Flash, StartsAt: &start, EndsAt: &end}); err != nil {
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

// outcome reads spec's voucher back after a burst, from the database and, for
// a flash voucher, from Redis, beside what the clients were told.
func (b *Bench) outcome(ctx context.Context, spec VoucherSpec, plan Plan, shots []Shot) (Outcome, error) {
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

// summary is d as a report shows it.
func (d DBState) summary() *DBSummary {
	return &DBSummary{TotalLimit: d.TotalLimit, Used: d.Used, Active: len(d.Active),
		Remaining: d.TotalLimit - d.Used, ByStatus: d.ByStatus}
}

// RedisState reads code's counter and admitted orders from the gate.
func (b *Bench) RedisState(ctx context.Context, code string) (gate.State, bool, error) {
	return b.gate.State(ctx, code)
}
