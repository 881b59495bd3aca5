package systemtest

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/testkit/agreementtest"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
)

func TestMain(m *testing.M) { os.Exit(devstacktest.RunTests(m)) }

// ledgerToken is the ledger's LEDGER_TOKEN, which the proxy sends and the
// tests use on the ledger's admin routes.
const ledgerToken = "test-token"

// redisTimeout is the proxy's REDIS_TIMEOUT, and the deadline of the tests'
// own Redis client.
const redisTimeout = 250 * time.Millisecond

// serviceBinary returns the path of bin/ledger or bin/proxy, both built once per test
// binary.
func serviceBinary(tb testing.TB, name string) string {
	tb.Helper()
	return filepath.Join(devstacktest.Binaries(tb, "../ledger", "../proxy"), name)
}

// stack is the system as it runs in production, a ledger and a proxy process
// over real Redis and Postgres, and the tests' own clients of those two servers
// to look at what they hold.
type stack struct {
	ProxyURL  string
	LedgerURL string
	Ledger    *devstack.Service
	Proxy     *devstack.Service
	gate      *gate.Gate
	pool      *pgxpool.Pool
	rdb       redis.UniversalClient
	opts      stackOptions // as newStack completed them, for startProxy
	checks    *agreementtest.Checks
}

type stackOptions struct {
	redisURL, dbURL string
	soldOutTTL      time.Duration // the proxy's SOLDOUT_TTL; 0: 2s
	coalesce        bool          // the proxy's PROXY_COALESCE
	ledgerEnv       []string      // added to the ledger's environment
}

// newStack starts a ledger and then a proxy in front of it on o's servers
// (the test binary's shared ones when o names none); tb.Cleanup stops both.
func newStack(tb testing.TB, o stackOptions) *stack {
	tb.Helper()
	if o.redisURL == "" {
		o.redisURL = devstacktest.RedisURL(tb)
	}
	if o.dbURL == "" {
		o.dbURL = devstacktest.PostgresURL(tb)
	}
	if o.soldOutTTL == 0 {
		o.soldOutTTL = 2 * time.Second
	}
	s := &stack{opts: o, checks: &agreementtest.Checks{}}
	s.Ledger, s.LedgerURL = startService(tb, "ledger", "LEDGER_ADDR", append([]string{
		"DATABASE_URL=" + o.dbURL, "REDIS_URL=" + o.redisURL, "LEDGER_TOKEN=" + ledgerToken,
		"EXPIRY_INTERVAL=1h", "RECONCILE_INTERVAL=1h",
	}, o.ledgerEnv...))
	s.Proxy, s.ProxyURL = s.startProxy(tb)

	rdb, err := gate.NewClient(o.redisURL, gate.ClientOptions{Timeout: redisTimeout})
	require.NoError(tb, err)
	tb.Cleanup(func() { rdb.Close() })
	s.gate, s.rdb = gate.New(rdb), rdb
	s.pool, err = pgxpool.New(context.Background(), o.dbURL)
	require.NoError(tb, err)
	tb.Cleanup(s.pool.Close)
	tb.Cleanup(func() { s.requireAgreement(tb) }) // while the ledger process serves
	return s
}

// startProxy starts a proxy in front of s's ledger, with s's options; newStack
// starts the first, a test that needs a second proxy (its own sold-out flags and
// cached terms) starts another. tb.Cleanup stops it.
func (s *stack) startProxy(tb testing.TB) (*devstack.Service, string) {
	tb.Helper()
	coalesce := "off"
	if s.opts.coalesce {
		coalesce = "on"
	}
	return startService(tb, "proxy", "PROXY_ADDR", []string{
		"REDIS_URL=" + s.opts.redisURL, "LEDGER_URL=" + s.LedgerURL, "LEDGER_TOKEN=" + ledgerToken,
		devstack.OpenEdge, "SOLDOUT_TTL=" + s.opts.soldOutTTL.String(), "VOUCHER_CACHE_TTL=5s",
		"REDIS_TIMEOUT=" + redisTimeout.String(), "LEDGER_TIMEOUT=1s",
		"PROXY_COALESCE=" + coalesce, "PROXY_MAX_BATCH=256",
		// The histories' clients retry an unknown answer within 20-200 ms,
		// well before Retry-After: refused early, every retry would be one
		// more unknown operation, and the history's bound on them stalls it.
		"REFUSE_EARLY_RETRIES=off",
	})
}

// startService runs bin/name listening on a free port, given to it in addrVar,
// and returns it with its base URL once its /healthz answers.
func startService(tb testing.TB, name, addrVar string, env []string) (*devstack.Service, string) {
	tb.Helper()
	port, err := devstack.FreePort()
	require.NoError(tb, err)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	env = append(env, addrVar+"="+addr, "SHUTDOWN_DELAY=0s") // no load balancer to wait for
	svc, err := devstack.StartService(name, serviceBinary(tb, name), env, "http://"+addr+"/healthz", devstacktest.ServiceLog(tb, name))
	require.NoError(tb, err)
	tb.Cleanup(func() { svc.Stop() })
	return svc, "http://" + addr
}

// newCode returns a voucher code unique to this test run.
func newCode(tb testing.TB) string {
	tb.Helper()
	return httpxtest.NewCode(tb, 16)
}

// createVoucher creates a voucher through the ledger's admin route.
func (s *stack) createVoucher(tb testing.TB, code string, limit, perUser int, flash bool) {
	tb.Helper()
	r := call(tb, "POST", s.LedgerURL+"/admin/vouchers", ledgerToken, map[string]any{
		"code": code, "discountAmount": 100_000, "minOrderAmount": 1_000, "totalLimit": limit,
		"perUserLimit": perUser, "flashSale": flash,
		"startsAt": time.Now().Add(-time.Hour).Format(time.RFC3339), "endsAt": time.Now().Add(time.Hour).Format(time.RFC3339),
	})
	require.Equal(tb, 201, r.Status, r.Raw)
	if flash {
		s.trackFlash(code)
	}
	knownAt(tb, code, s.ProxyURL)
}

// knownAt waits until each proxy knows the voucher code: a proxy answers a
// code outside its set of codes 404 without asking the ledger, and a created
// voucher joins the set when its creation's message arrives on the change
// channel, a few milliseconds after the ledger's 201 (LIVE_CODES_REFRESH, 1 s,
// when that message is lost). The probe is below minOrderAmount: NOT_ELIGIBLE,
// decided without writing anything.
func knownAt(tb testing.TB, code string, proxies ...string) {
	tb.Helper()
	for _, p := range proxies {
		deadline := time.Now().Add(3 * time.Second)
		for {
			r := call(tb, "POST", p+"/vouchers/"+code+"/reservations", "",
				map[string]any{"customerId": 1, "orderId": code + "-probe", "orderAmount": 1})
			if r.Status != http.StatusNotFound {
				break
			}
			require.True(tb, time.Now().Before(deadline), "proxy %s still answers %s 404 three seconds after its creation: %s", p, code, r.Raw)
			time.Sleep(5 * time.Millisecond)
		}
	}
}

var client = &http.Client{
	Timeout:   30 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 1024},
}

// call sends body with the tests' client, as httpxtest.Call does.
func call(tb testing.TB, method, url, token string, body any) httpxtest.Reply {
	tb.Helper()
	return httpxtest.Call(tb, client, method, url, token, body)
}

// dbState is a voucher as the database sees it.
type dbState struct {
	Used, Active, MaxPerCustomer, Remaining int
}

// voucherStateSQL reads a voucher's used_count and total_limit with the
// active rows ($1 is the code) counted in total and per customer (the most).
const voucherStateSQL = `
	SELECT v.used_count, v.total_limit,
	       (SELECT count(*) FROM voucher_redemption WHERE voucher_code = v.code AND status IN ('RESERVED','CONFIRMED')),
	       coalesce((SELECT max(n) FROM (SELECT count(*) AS n FROM voucher_redemption
	                 WHERE voucher_code = v.code AND status IN ('RESERVED','CONFIRMED') GROUP BY customer_id) x), 0)
	FROM voucher v WHERE v.code = $1`

func (s *stack) db(tb testing.TB, code string) dbState {
	tb.Helper()
	var d dbState
	var limit int
	require.NoError(tb, s.pool.QueryRow(context.Background(), voucherStateSQL, code).
		Scan(&d.Used, &limit, &d.Active, &d.MaxPerCustomer))
	d.Remaining = limit - d.Used
	return d
}

// redisRemaining reads the gate's counter.
func (s *stack) redisRemaining(tb testing.TB, code string) int64 {
	tb.Helper()
	st, loaded, err := s.gate.State(context.Background(), code)
	require.NoError(tb, err)
	require.True(tb, loaded, "voucher %s not loaded in redis", code)
	return st.Remaining
}
