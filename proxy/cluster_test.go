package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/testkit/agreementtest"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

// fleet is several proxies and ledgers over one Redis (Cluster) and one Postgres.
type fleet struct {
	proxies    []*stack
	ledgers    []*devstack.Service
	ledgerURLs []string
	pool       *pgxpool.Pool
	gate       *gate.Gate
}

func newFleet(tb testing.TB, redisURL string, proxies, ledgers int) *fleet {
	tb.Helper()
	o := stackOptions{redisURL: redisURL, dbURL: devstacktest.PostgresURL(tb), coalesce: true}
	f := &fleet{}
	for i := 0; i < ledgers; i++ {
		led, url := startLedger(tb, o)
		f.ledgers, f.ledgerURLs = append(f.ledgers, led), append(f.ledgerURLs, url)
	}
	for i := 0; i < proxies; i++ {
		f.proxies = append(f.proxies, startProxy(tb, o, f.ledgerURLs[i%ledgers]))
	}
	pool, err := pgxpool.New(context.Background(), o.dbURL)
	require.NoError(tb, err)
	tb.Cleanup(pool.Close)
	f.pool, f.gate = pool, f.proxies[0].gate
	return f
}

// reserveUntilAnswered sends one reserve, retrying with the same orderId while
// the answer is a 503 or no answer at all (as a client should), for up to 15 s.
func reserveUntilAnswered(proxyURL, code string, customer int64, order string) (int, string) {
	body, _ := json.Marshal(map[string]any{"customerId": customer, "orderId": order, "orderAmount": 5_000})
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := client.Post(proxyURL+"/vouchers/"+code+"/reservations", "application/json", bytes.NewReader(body))
		if err == nil {
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
				return resp.StatusCode, string(raw)
			}
		} else if time.Now().After(deadline) {
			return 0, err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type clusterOutcome struct {
	code   string
	order  string
	status int
	body   string
}

// crowdOnFleet sends, for every voucher, requests from customers (with retries
// of earlier orders), spread round-robin over the proxies, all at once.
func crowdOnFleet(f *fleet, codes []string, perVoucher, customers int, inflight int) []clusterOutcome {
	var reqs []clusterOutcome
	for _, code := range codes {
		for i := 0; i < perVoucher; i++ {
			c := i % customers
			if i%10 == 9 {
				c = (i - 9) % customers // a retry of an earlier order
			}
			reqs = append(reqs, clusterOutcome{code: code, order: fmt.Sprintf("%s-c%d", code, c)})
		}
	}
	sem := make(chan struct{}, inflight)
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r := &reqs[i]
			var customer int64
			fmt.Sscanf(r.order[len(r.code)+2:], "%d", &customer)
			r.status, r.body = reserveUntilAnswered(f.proxies[i%len(f.proxies)].ProxyURL, r.code, customer+1, r.order)
		}()
	}
	wg.Wait()
	return reqs
}

// checkFleet asserts every voucher is exact in the clients' view, the
// database and (after a reconcile) Redis.
// repairsOK is for a fleet whose Redis lost data on purpose (a master killed):
// the reconcile may repair, and agreement is checked after it only.
func checkFleet(t *testing.T, f *fleet, codes []string, out []clusterOutcome, stock int, repairsOK bool) {
	t.Helper()
	defer func() {
		agreementtest.RequireAgreement(t, f.proxies[0].rdb, f.pool, codes...)
		if !repairsOK {
			for _, u := range f.ledgerURLs {
				agreementtest.RequireNoRepairMetrics(t, u+"/metrics")
			}
			agreementtest.RequireNoRepairAudited(t, f.pool, codes...)
		}
	}()
	admitted := map[string]map[string]bool{}
	for _, o := range out {
		switch o.status {
		case 201:
			if admitted[o.code] == nil {
				admitted[o.code] = map[string]bool{}
			}
			admitted[o.code][o.order] = true
		case 409:
		default:
			t.Errorf("reserve %s/%s = %d %s, want 201 or 409", o.code, o.order, o.status, o.body)
		}
	}
	for _, code := range codes {
		var used, active, total int
		require.NoError(t, f.pool.QueryRow(context.Background(), `
			SELECT used_count, total_limit,
			       (SELECT count(*) FROM voucher_redemption WHERE voucher_code = $1 AND status IN ('RESERVED','CONFIRMED'))
			FROM voucher WHERE code = $1`, code).Scan(&used, &total, &active))
		assert.Equal(t, stock, len(admitted[code]), "%s: orders admitted", code)
		assert.Equal(t, stock, used, "%s: used_count", code)
		assert.Equal(t, used, active, "%s: rows", code)
		for order := range admitted[code] {
			var status string
			require.NoError(t, f.pool.QueryRow(context.Background(),
				`SELECT status FROM voucher_redemption WHERE order_id = $1`, order).Scan(&status), "201 without a row: %s", order)
		}
		if !repairsOK {
			// Redis agrees before the reconcile, on its own, so
			// the reconcile has nothing to repair.
			agreementtest.RequireAgreement(t, f.proxies[0].rdb, f.pool, code)
		}
		// Right after a failover a ledger's cluster client may still route to
		// the dead master until it refreshes its slots: the reconcile then
		// answers a fast 503, and an operator asks again.
		var r reply
		require.Eventually(t, func() bool {
			r = call(t, "POST", f.ledgerURLs[0]+"/admin/vouchers/"+code+"/reconcile", "test-token", nil)
			return r.Status != http.StatusServiceUnavailable
		}, 10*time.Second, 200*time.Millisecond, "reconcile after the failover: %s", r.Raw)
		require.Equal(t, 200, r.Status, r.Raw)
		st, loaded, err := f.gate.State(context.Background(), code)
		require.NoError(t, err)
		require.True(t, loaded)
		assert.EqualValues(t, total-used, st.Remaining, "%s: redis remaining = db remaining", code)
	}
}

func createFlash(t *testing.T, ledgerURL, code string, stock int) {
	t.Helper()
	r := call(t, "POST", ledgerURL+"/admin/vouchers", "test-token", voucherBody(code, stock, 1, true))
	require.Equal(t, 201, r.Status, r.Raw)
}

// 20 vouchers spread over a 3-master Redis Cluster, 3 proxies, 2 ledgers:
// every voucher exact.
func TestClusterFleetIsExact(t *testing.T) {
	t.Parallel()
	cl := devstacktest.NewRedisCluster(t, devstack.ClusterOptions{Masters: 3})
	f := newFleet(t, cl.URL(), 3, 2)
	codes := make([]string, 20)
	masters := map[string]bool{}
	for i := range codes {
		codes[i] = fmt.Sprintf("%s-v%d", newCode(t), i)
		createFlash(t, f.ledgerURLs[i%2], codes[i], 30)
		m, err := cl.MasterOf(gate.Keys(codes[i])[0])
		require.NoError(t, err)
		masters[m.Addr] = true
	}
	assert.Len(t, masters, 3, "20 vouchers should spread over the 3 masters")
	out := crowdOnFleet(f, codes, 100, 60, 256)
	checkFleet(t, f, codes, out, 30, false)
}

// A master killed in the middle of a burst, its replica promoted: never an
// oversell, and reload and reconcile bring Redis back to the database.
func TestClusterMasterFailover(t *testing.T) {
	t.Parallel()
	cl := devstacktest.NewRedisCluster(t, devstack.ClusterOptions{Masters: 3, Replicas: 1})
	f := newFleet(t, cl.URL(), 3, 2)
	codes := make([]string, 6)
	for i := range codes {
		codes[i] = fmt.Sprintf("%s-v%d", newCode(t), i)
		createFlash(t, f.ledgerURLs[i%2], codes[i], 40)
	}
	victim, err := cl.MasterOf(gate.Keys(codes[0])[0])
	require.NoError(t, err)

	done := make(chan []clusterOutcome)
	go func() { done <- crowdOnFleet(f, codes, 200, 120, 64) }()
	require.Eventually(t, func() bool {
		var used int
		_ = f.pool.QueryRow(context.Background(), `SELECT used_count FROM voucher WHERE code = $1`, codes[0]).Scan(&used)
		return used >= 10
	}, 15*time.Second, 5*time.Millisecond)
	require.NoError(t, victim.Kill())
	out := <-done
	require.NoError(t, cl.WaitOK(20*time.Second))
	// Exempt from "no repair": a master is killed mid-burst on purpose and its
	// replica may miss the last writes; agreement after the reconcile holds.
	checkFleet(t, f, codes, out, 40, true)
}
