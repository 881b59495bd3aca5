package compare

import (
	"context"
	"flag"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/httpx/decode"
	"github.com/flashgate/flashgate/shared/voucher"
)

// solution1Handler is the article's "Solution 1" (section 6) as a gin server:
// every reserve is one transaction on Postgres, the guarded UPDATE of the
// voucher row (used_count < total_limit, within the voucher's dates) and, when
// it took a use, the redemption row, then COMMIT. Nothing in front of the
// database: compare measures flashgate's admitted path against it on the same
// Postgres, in the same run. It binds the body as the proxy does; it keeps no
// per-customer count and no idempotency (the article's code has neither).
func solution1Handler(pool *pgxpool.Pool) http.Handler {
	r := gin.New()
	r.GET(api.HealthzPath, func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	r.POST(api.ReservationsPath(":code"), func(c *gin.Context) {
		code, err := decode.CodeParam(c)
		if err != nil {
			httpx.WriteError(c, err)
			return
		}
		cl, err := decode.BindClaim(c)
		if err != nil {
			httpx.WriteError(c, err)
			return
		}
		took, err := redeemSolution1(c, pool, code, cl)
		switch {
		case err != nil:
			httpx.WriteError(c, fmt.Errorf("solution1 %s: %w: %w", code, err, voucher.ErrUnavailable))
		case !took:
			httpx.WriteError(c, voucher.ErrOutOfStock)
		default:
			c.JSON(http.StatusCreated, gin.H{"code": code, "orderId": cl.OrderID, "status": "CONFIRMED"})
		}
	})
	return r
}

// redeemSolution1 is the article's redeem(): one transaction per reservation.
func redeemSolution1(ctx context.Context, pool *pgxpool.Pool, code string, cl voucher.Claim) (bool, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	tag, err := tx.Exec(ctx, `
		UPDATE voucher SET used_count = used_count + 1
		WHERE code = $1 AND used_count < total_limit AND now() >= starts_at AND now() < ends_at`, code)
	if err != nil || tag.RowsAffected() == 0 {
		return false, err
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO voucher_redemption
		       (voucher_code, customer_id, order_id, status, expires_at, order_amount, discount_amount, confirmed_at)
		SELECT code, $2, $3, 'CONFIRMED', now(), $4::bigint, least(discount_amount, $4::bigint), now()
		FROM voucher WHERE code = $1`, code, cl.CustomerID, cl.OrderID, cl.OrderAmount); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}

// RunSolution1 is `loadtest solution1`: the server in the foreground on the
// database at --db (flashgate's schema: the ledger migrates it) until SIGINT
// or SIGTERM.
func RunSolution1(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("solution1", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:8091", "listen address")
	db := fs.String("db", "", "DATABASE_URL (flashgate's schema)")
	conns := fs.Int("conns", 32, "Postgres pool size (the ledger's DB_MAX_CONNS default)")
	_ = fs.Parse(args)
	cfg, err := pgxpool.ParseConfig(*db)
	if err != nil {
		return fmt.Errorf("--db: %w", err)
	}
	cfg.MaxConns, cfg.MinConns = int32(*conns), int32(min(*conns, 4))
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	gin.SetMode(gin.ReleaseMode)
	return serveUntil(ctx, "solution1", *addr, solution1Handler(pool))
}
