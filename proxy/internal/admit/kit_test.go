package admit

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/proxy/internal/ledger"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
	"github.com/flashgate/flashgate/shared/voucher"
)

func TestMain(m *testing.M) {
	// go-redis's own lines go where main sends them, the JSON log: here, nowhere.
	redis.SetLogger(gate.NewLogger(slog.New(slog.DiscardHandler)))
	os.Exit(devstacktest.RunTests(m))
}

// kit is a real ledger process over the shared Redis and PostgreSQL, and an
// Admitter in front of it, driven through its methods (the proxy's own tests
// drive it through the edge).
type kit struct {
	ledgerURL string
	a         *Admitter
	gate      *gate.Gate
	rdb       redis.UniversalClient
}

// newKit starts a ledger and an admitter (coalescing, the sold-out flag held
// for soldOutTTL) that watches the change channel.
func newKit(tb testing.TB, soldOutTTL time.Duration) *kit {
	tb.Helper()
	redisURL, dbURL := devstacktest.RedisURL(tb), devstacktest.PostgresURL(tb)
	port, err := devstack.FreePort()
	require.NoError(tb, err)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	bin := filepath.Join(devstacktest.Binaries(tb, "../../../ledger"), "ledger")
	env := []string{
		"LEDGER_ADDR=" + addr, "DATABASE_URL=" + dbURL, "REDIS_URL=" + redisURL,
		"LEDGER_TOKEN=test-token", "EXPIRY_INTERVAL=1h", "RECONCILE_INTERVAL=1h", "SHUTDOWN_DELAY=0s",
	}
	led, err := devstack.StartService("ledger", bin, env, "http://"+addr+"/healthz", devstacktest.ServiceLog(tb, "ledger"))
	require.NoError(tb, err)
	tb.Cleanup(func() { led.Stop() })

	rdb, err := gate.NewClient(redisURL, gate.ClientOptions{Timeout: 250 * time.Millisecond})
	require.NoError(tb, err)
	tb.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	k := &kit{ledgerURL: "http://" + addr, gate: gate.New(rdb), rdb: rdb}
	discard := slog.New(slog.DiscardHandler)
	k.a, err = New(ctx, k.gate, ledger.NewClient(k.ledgerURL, "test-token", 10*time.Second), Config{
		SoldOutTTL: soldOutTTL, VoucherCacheTTL: 5 * time.Second, RedisTimeout: 250 * time.Millisecond,
		Coalesce: true, MaxBatch: 256, Lookups: 8,
	}, discard)
	require.NoError(tb, err)
	tb.Cleanup(k.a.Close)
	_, stop := k.a.WatchChanges(ctx, rdb, discard)
	tb.Cleanup(stop)
	_ = k.a.LoadCodes(ctx)
	return k
}

var client = &http.Client{Timeout: 30 * time.Second}

// createVoucher creates a flash voucher live for the next hour through the
// ledger's admin route, and returns its code.
func (k *kit) createVoucher(tb testing.TB, limit int) string {
	tb.Helper()
	code := httpxtest.NewCode(tb, 16)
	r := httpxtest.Call(tb, client, http.MethodPost, k.ledgerURL+"/admin/vouchers", "test-token", map[string]any{
		"code": code, "discountAmount": 1_000, "minOrderAmount": 1_000, "totalLimit": limit, "perUserLimit": 1,
		"flashSale": true, "startsAt": time.Now().Add(-time.Hour).Format(time.RFC3339),
		"endsAt": time.Now().Add(time.Hour).Format(time.RFC3339),
	})
	require.Equal(tb, http.StatusCreated, r.Status, r.Raw)
	return code
}

// reserve runs a reserve of 5,000 through the admitter, as the edge does.
func (k *kit) reserve(code string, customer int64, order string) (ledger.Reply, error) {
	cl := voucher.Claim{CustomerID: customer, OrderID: order, OrderAmount: 5_000}
	return k.a.Reserve(context.Background(), code, cl, "")
}

// status is a reserve's answer as the edge writes it: the reply's status, or
// the error's code.
func status(rep ledger.Reply, err error) string {
	if err != nil {
		return voucher.ErrorCode(err)
	}
	return fmt.Sprint(rep.Status)
}
