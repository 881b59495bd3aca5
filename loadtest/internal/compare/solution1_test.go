package compare

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/loadtest/internal/verify"
	"github.com/flashgate/flashgate/migrations"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

func TestMain(m *testing.M) { os.Exit(devstacktest.RunTests(m)) }

// TestSolution1Exact: the article's one transaction per reservation, hammered
// by many goroutines at once for a voucher of 50 uses, admits exactly 50 (one
// row each, used_count 50) and answers everyone else OUT_OF_STOCK: compare's
// solution1 path is a correct baseline, not a strawman.
func TestSolution1Exact(t *testing.T) {
	ctx := context.Background()
	url := devstacktest.PostgresURL(t)
	require.NoError(t, migrations.MigrateURL(ctx, url))
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	code := verify.NewCode("sol1")
	_, err = pool.Exec(ctx, `INSERT INTO voucher (code, discount_amount, total_limit, starts_at, ends_at)
		VALUES ($1, 100000, 50, now() - interval '1 hour', now() + interval '1 hour')`, code)
	require.NoError(t, err)

	srv := httptest.NewServer(solution1Handler(pool))
	t.Cleanup(srv.Close)
	var created, refused atomic.Int64
	var wg sync.WaitGroup
	for g := range 20 {
		wg.Go(func() {
			for i := range 10 {
				body := wrkBody(int64(g*10+i+1), fmt.Sprintf("%s-%d-%d", code, g, i))
				resp, err := http.Post(srv.URL+api.ReservationsPath(code), "application/json", strings.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusCreated:
					created.Add(1)
				case http.StatusConflict:
					refused.Add(1)
				default:
					t.Errorf("reserve = %d, want 201 or 409", resp.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	var used, rows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT used_count, (SELECT count(*) FROM voucher_redemption WHERE voucher_code = $1)
		FROM voucher WHERE code = $1`, code).Scan(&used, &rows))
	if created.Load() != 50 || refused.Load() != 150 || used != 50 || rows != 50 {
		t.Fatalf("solution1: %d created, %d refused, used_count %d, %d rows; want 50, 150, 50, 50",
			created.Load(), refused.Load(), used, rows)
	}
}

// TestParseWrk reads wrk --latency's output as compare does.
func TestParseWrk(t *testing.T) {
	out := `Running 5s test @ http://127.0.0.1:8080
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.90ms    2.05ms  43.69ms   91.83%
    Req/Sec    35.12k     2.07k   38.43k    78.00%
  Latency Distribution
     50%  845.00us
     75%    2.55ms
     90%    4.03ms
     99%    1.20s
  174740 requests in 5.00s, 35.16MB read
  Socket errors: connect 0, read 2, write 0, timeout 3
  Non-2xx or 3xx responses: 174740
Requests/sec:  34920.56
Transfer/sec:      7.03MB
`
	r, err := parseWrk(out)
	require.NoError(t, err)
	want := WrkRun{Rate: 34920.56, P50Ms: 0.845, P99Ms: 1200, Requests: 174740, Non2xx: 174740, SocketErrs: 5}
	if r != want {
		t.Fatalf("parseWrk = %+v, want %+v", r, want)
	}
	_, err = parseWrk("unable to connect to 127.0.0.1:8080 Connection refused")
	require.Error(t, err)
}
