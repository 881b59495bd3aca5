package chaos

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flashgate/flashgate/loadtest/internal/stack"
	"github.com/flashgate/flashgate/loadtest/internal/verify"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
)

// chaosLedgerEnv runs the ledger without its periodic reconciler (its first
// run would be an hour in): Redis must agree with the database on its own
// (Redis agrees with Postgres on its own), and a scenario whose reconciler is on
// (Scenario.Reconciler) adds reconcilerEnv. The expiry sweep runs every
// second; RESERVATION_TTL stays at its default: no scenario needs expiry, and
// an expired hold would look like a 201 without its row. HANGING_GRACE is
// short for the scenarios that reconcile, and chaosProxyEnv is kept below it.
var chaosLedgerEnv = []string{"RECONCILE_INTERVAL=1h", "HANGING_GRACE=2s", "EXPIRY_INTERVAL=1s"}

// reconcilerEnv is a scenario's that keeps the reconciler: a reconcile every
// second, so that recovery from lost Redis data is a matter of seconds.
var reconcilerEnv = []string{"RECONCILE_INTERVAL=1s"}

// ledgerEnvOf is the ledgers' environment in sc: chaosLedgerEnv, then
// reconcilerEnv if sc keeps the reconciler, then sc's own (a later entry wins).
func ledgerEnvOf(sc Scenario) []string {
	if sc.Reconciler == "" {
		return slices.Concat(chaosLedgerEnv, sc.LedgerEnv)
	}
	return slices.Concat(chaosLedgerEnv, reconcilerEnv, sc.LedgerEnv)
}

// chaosProxyEnv keeps the proxy's ledger deadline below HANGING_GRACE, as the
// README asks: an admission the reconciler frees can no longer be on its way
// to the ledger through the proxy.
var chaosProxyEnv = []string{"LEDGER_TIMEOUT=1500ms"}

// rig is one scenario's system: a Redis of its own, a database of its own on
// the shared Postgres server, the ledger(s) and the proxy with their Redis and
// Postgres traffic routed through toxiproxy, and a Bench that reads the
// servers directly.
type rig struct {
	pg      *devstack.Postgres
	redis   *devstack.Redis
	net     *faultNet
	lb      *balancer
	st      *stack.Stack
	ledgerB *devstack.Service // the second ledger of a two-ledger scenario or a fleet
	fleet   *fleet            // two proxies and two ledgers behind balancers (Scenario.Fleet)
	entry   string            // where clients send: the proxy, or the fleet's balancer
	bench   *verify.Bench
	dbName  string
	// ledgerURLs reach each ledger itself (not a balancer), for its /metrics.
	ledgerURLs  []string
	reconciler  string // the scenario's Scenario.Reconciler: why repairs are allowed; "": they fail it
	repairsFail bool   // Scenario.RepairsFail: repairs fail it although the reconciler runs
}

func startRig(ctx context.Context, pg *devstack.Postgres, sc Scenario, cfg Config) (r *rig, err error) {
	r = &rig{pg: pg, reconciler: sc.Reconciler, repairsFail: sc.RepairsFail}
	defer func() {
		if err != nil {
			r.Close(ctx)
		}
	}()
	r.dbName = fmt.Sprintf("chaos_%s_%d", strings.ReplaceAll(sc.Name, "-", "_"), verify.NextSeq())
	dbURL, err := createDatabase(ctx, pg.URL(), r.dbName)
	if err != nil {
		return r, err
	}
	if r.redis, err = devstack.StartRedis(devstack.RedisOptions{AOF: !sc.NoPersistence}); err != nil {
		return r, err
	}
	r.net = newFaultNet()
	links := map[string]string{linkProxyRedis: r.redis.Addr, linkLedgerRedis: r.redis.Addr, linkLedgerPG: pg.Addr}
	addrs := map[string]string{}
	for name, upstream := range links {
		addrs[name] = upstream
		if sc.Direct {
			continue
		}
		if addrs[name], err = r.net.Link(name, upstream); err != nil {
			return r, err
		}
	}
	o := stack.Options{
		BinDir: cfg.BinDir, Token: chaosToken, ExternalDB: dbURL, ExternalRDB: r.redis.URL(),
		LedgerDBURL:    withHost(dbURL, addrs[linkLedgerPG]),
		LedgerRedisURL: "redis://" + addrs[linkLedgerRedis] + "/0",
		ProxyRedisURL:  "redis://" + addrs[linkProxyRedis] + "/0",
		LedgerEnv:      ledgerEnvOf(sc), ProxyEnv: slices.Concat(chaosProxyEnv, sc.ProxyEnv),
		ServiceLog:    cfg.ServiceLog,
		AdmissionsLog: sc.AdmissionsLog, AdmissionsLogOnDisk: sc.AdmissionsLog,
	}
	var addrB string
	if sc.Fleet {
		if err = r.planFleet(&o); err != nil {
			return r, err
		}
	} else if sc.TwoLedgers {
		if o.LedgerAddr, err = stack.AddrOr(""); err != nil {
			return r, err
		}
		if addrB, err = stack.AddrOr(""); err != nil {
			return r, err
		}
		if r.lb, err = startBalancer(o.LedgerAddr, addrB); err != nil {
			return r, err
		}
		o.ProxyLedgerURL = "http://" + r.lb.Addr()
	}
	if r.st, err = stack.Start(o); err != nil {
		return r, err
	}
	r.ledgerURLs = []string{r.st.LedgerURL}
	if sc.TwoLedgers {
		var urlB string
		if r.ledgerB, urlB, err = r.st.StartLedger("ledger-b", addrB); err != nil {
			return r, err
		}
		r.ledgerURLs = append(r.ledgerURLs, urlB)
	}
	e := r.st.Endpoints()
	if sc.Fleet {
		if err = r.startFleet(ctx); err != nil {
			return r, err
		}
		e = r.fleet.endpoints(e)
	}
	r.entry = e.ProxyURL
	r.bench, err = verify.OpenBench(ctx, e)
	return r, err
}

// Close stops everything the rig started and drops its database.
func (r *rig) Close(ctx context.Context) {
	if r.bench != nil {
		r.bench.Close()
	}
	if r.st != nil {
		r.st.Stop()
	}
	if r.lb != nil {
		r.lb.Close()
	}
	if r.fleet != nil {
		r.fleet.Close()
	}
	if r.net != nil {
		r.net.Close()
	}
	if r.redis != nil {
		_ = r.redis.Stop()
	}
	if r.dbName != "" {
		_ = dropDatabase(context.WithoutCancel(ctx), r.pg.URL(), r.dbName)
	}
}

// withHost returns the URL u with its host:port replaced.
func withHost(u, host string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	p.Host = host
	return p.String()
}

// createDatabase creates a database on the server of serverURL and returns
// its URL.
func createDatabase(ctx context.Context, serverURL, name string) (string, error) {
	conn, err := pgx.Connect(ctx, withPath(serverURL, "postgres"))
	if err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return withPath(serverURL, name), nil
}

func dropDatabase(ctx context.Context, serverURL, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, withPath(serverURL, "postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}

func withPath(u, database string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	p.Path = "/" + database
	return p.String()
}
