package compare

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/voucher"
)

// The floor's three labs: what `loadtest floor` sends in batches.

//go:embed floor.lua
var floorLua string

// floorOrders is how many distinct orderIds the labs cycle through: enough
// that Redis's hash and Postgres's index are not tiny, few enough that a run
// does not fill the memory.
const floorOrders = 100_000

// floorClaims are the claims of the batch starting at the i-th order.
func floorClaims(i, size int) []voucher.Claim {
	out := make([]voucher.Claim, size)
	for k := range out {
		n := (i + k) % floorOrders
		out[k] = voucher.Claim{CustomerID: int64(n + 1), OrderID: "floor-" + strconv.Itoa(n), OrderAmount: 5000}
	}
	return out
}

// redisFloor is the script lab: one EVALSHA of floor.lua per batch.
func redisFloor(url string) (func(context.Context, int, time.Duration) (int64, error), func(), error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, func() {}, err
	}
	rdb := redis.NewClient(opts)
	script := redis.NewScript(floorLua)
	run := func(ctx context.Context, size int, d time.Duration) (int64, error) {
		var n int64
		args := make([]any, size)
		for end := time.Now().Add(d); time.Now().Before(end); n += int64(size) {
			for k, c := range floorClaims(int(n), size) {
				args[k] = c.OrderID
			}
			if err := script.Run(ctx, rdb, []string{"floor:{F}:orders", "floor:{F}:remaining"}, args...).Err(); err != nil {
				return n, err
			}
		}
		return n, nil
	}
	return run, func() { _ = rdb.Close() }, nil
}

// httpFloor is the ledger-call lab: one POST of a BatchRequest per batch to
// the floor-ledger server, its BatchReply read as the proxy reads it.
func httpFloor(url string) func(context.Context, int, time.Duration) (int64, error) {
	client := &http.Client{Timeout: 10 * time.Second}
	return func(ctx context.Context, size int, d time.Duration) (int64, error) {
		var n int64
		for end := time.Now().Add(d); time.Now().Before(end); n += int64(size) {
			body, err := json.Marshal(api.BatchRequest{Claims: floorClaims(int(n), size)})
			if err != nil {
				return n, err
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+floorBatchPath, bytes.NewReader(body))
			if err != nil {
				return n, err
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				return n, err
			}
			var reply api.BatchReply[json.RawMessage]
			err = json.NewDecoder(resp.Body).Decode(&reply)
			resp.Body.Close()
			if err != nil || len(reply.Results) != size {
				return n, fmt.Errorf("batch reply: %d results, %v", len(reply.Results), err)
			}
		}
		return n, nil
	}
}

const floorBatchPath = "/batch"

// RunFloorLedger is `loadtest floor-ledger`: a gin server that reads a
// BatchRequest and answers each claim 201 with a reservation's body, doing
// nothing else; the floor's HTTP lab measures it.
func RunFloorLedger(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("floor-ledger", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:8091", "listen address")
	_ = fs.Parse(args)
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.GET(api.HealthzPath, func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	r.POST(floorBatchPath, func(c *gin.Context) {
		var req api.BatchRequest
		if err := c.ShouldBindJSON(&req); err != nil {
			c.JSON(http.StatusBadRequest, api.ErrorBody{Error: voucher.CodeInvalidRequest, Message: err.Error()})
			return
		}
		now := time.Now()
		reply := api.BatchReply[voucher.Reservation]{Results: make([]api.ItemReply[voucher.Reservation], len(req.Claims))}
		for i, cl := range req.Claims {
			reply.Results[i] = api.ItemReply[voucher.Reservation]{Status: http.StatusCreated, Body: voucher.Reservation{
				OrderID: cl.OrderID, CustomerID: cl.CustomerID, Status: voucher.Reserved, CreatedAt: now, ExpiresAt: now.Add(15 * time.Minute)}}
		}
		c.JSON(http.StatusOK, reply)
	})
	return serveUntil(ctx, "floor-ledger", *addr, r)
}

// floorTable is a row like an admitted reservation's, with its unique
// orderId: the least the ledger writes per admitted request.
const floorTable = `CREATE TABLE floor_redemption (
	id bigserial PRIMARY KEY, voucher_code text NOT NULL, customer_id bigint NOT NULL,
	order_id text NOT NULL UNIQUE, status text NOT NULL, expires_at timestamptz NOT NULL,
	order_amount bigint NOT NULL, discount_amount bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`

// floorInsert writes one batch in one statement, its own transaction (one
// commit); an orderId seen before (the labs cycle) replaces nothing.
const floorInsert = `INSERT INTO floor_redemption (voucher_code, customer_id, order_id, status, expires_at, order_amount, discount_amount)
	SELECT 'FLOOR', c, o, 'RESERVED', now() + interval '15 minutes', a, 1000 FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS t(c, o, a)
	ON CONFLICT (order_id) DO NOTHING`

// postgresFloor is the row lab: one multi-row INSERT per batch.
func postgresFloor(ctx context.Context, url string) (func(context.Context, int, time.Duration) (int64, error), func(), error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, func() {}, err
	}
	if _, err := conn.Exec(ctx, floorTable); err != nil {
		_ = conn.Close(ctx)
		return nil, func() {}, err
	}
	run := func(ctx context.Context, size int, d time.Duration) (int64, error) {
		var n int64
		// The rows a batch writes are new: each size starts past the last.
		if _, err := conn.Exec(ctx, "TRUNCATE floor_redemption"); err != nil {
			return 0, err
		}
		for end := time.Now().Add(d); time.Now().Before(end); n += int64(size) {
			claims := floorClaims(int(n), size)
			cs, os, as := make([]int64, size), make([]string, size), make([]int64, size)
			for k, c := range claims {
				cs[k], os[k], as[k] = c.CustomerID, c.OrderID, c.OrderAmount
			}
			if _, err := conn.Exec(ctx, floorInsert, cs, os, as); err != nil {
				return n, err
			}
		}
		return n, nil
	}
	return run, func() { _ = conn.Close(context.Background()) }, nil
}
