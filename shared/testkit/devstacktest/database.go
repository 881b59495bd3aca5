package devstacktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
)

// NewDatabase creates an empty database on the test binary's PostgreSQL (PostgresURL),
// dropped when the test ends, and returns its URL. A stack whose ledger runs jobs (the
// expiry sweep, the reconciler) over every voucher of its database needs one of its own
// when another stack runs beside it on another Redis: each would sweep and reconcile the
// other's vouchers against the wrong Redis.
func NewDatabase(tb testing.TB) string {
	tb.Helper()
	base := PostgresURL(tb)
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatalf("new database: %v", err)
	}
	name := "t_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		tb.Fatalf("new database: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatalf("new database: %v", err)
	}
	tb.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatalf("new database: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}
