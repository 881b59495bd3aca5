package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/flashgate/flashgate/shared/devstack"
)

// The chaos harness runs each fault scenario under a burst on a system of its
// own, then checks the invariants against the database and Redis and measures
// how long the system took to recover by itself.

// The links the harness can break: an embedded toxiproxy between one service
// and one server.
const (
	linkProxyRedis  = "proxy-redis"
	linkLedgerRedis = "ledger-redis"
	linkLedgerPG    = "ledger-postgres"
)

// chaosLedgerEnv runs the ledger's background jobs on short intervals, so that
// recovery without an operator is a matter of seconds. RESERVATION_TTL stays at
// its default: no scenario needs expiry, and an expired hold would look like a
// 201 without its row.
var chaosLedgerEnv = []string{"RECONCILE_INTERVAL=1s", "HANGING_GRACE=2s", "EXPIRY_INTERVAL=1s"}

// chaosProxyEnv keeps the proxy's ledger deadline below HANGING_GRACE, as the
// README asks: an admission the reconciler frees can no longer be on its way
// to the ledger through the proxy.
var chaosProxyEnv = []string{"LEDGER_TIMEOUT=1500ms"}

const (
	chaosToken = "chaos-token"
	// probeStock is the probe voucher's uses: probes never sell it out, so
	// every answered probe is a 201 that needed Redis, the ledger and Postgres.
	probeStock   = 100_000
	probeEvery   = 50 * time.Millisecond
	probeTimeout = 2 * time.Second
	probesInARow = 5 // answered probes in a row that count as recovered
	// retryingShare is the arrival rate of the clients that retry their 503s,
	// as a share of the burst's.
	retryingShare = 0.05
	settlePolling = 100 * time.Millisecond
)

// ChaosConfig is what every scenario of a run shares: the burst it runs under,
// when the fault strikes and how long it lasts, and the recovery bounds.
type ChaosConfig struct {
	BinDir        string        // where bin/ledger and bin/proxy are
	Rate          float64       // burst requests per second (open model)
	Duration      time.Duration // burst length
	FaultAt       time.Duration // the fault starts this long into the burst
	FaultFor      time.Duration // and lasts this long (a kill: down this long, then restarted)
	Stock         int           // the burst voucher's uses; 0: 30% of the requests
	RecoveryBound time.Duration // after the fault, new reserves are answered within this
	SettleBound   time.Duration // after the last request, Redis = DB within this
	Fast503       time.Duration // while the fault lasts, p99 of the 503 answers stays within this
	Seed          uint64
	Attack        AttackOptions
	ServiceLog    *os.File // where the services write their output; nil: stderr
}

// DefaultChaos is `loadtest chaos` without flags: a rate this 2-core machine
// sustains with a fault in the path, and a fault long enough to trip
// breakers and time requests out.
var DefaultChaos = ChaosConfig{
	Rate: 1500, Duration: 6 * time.Second, FaultAt: 1500 * time.Millisecond, FaultFor: 2 * time.Second,
	RecoveryBound: 10 * time.Second, SettleBound: 10 * time.Second, Fast503: 1500 * time.Millisecond, Seed: 1,
	Attack: AttackOptions{Workers: 64, MaxWorkers: 4096, Connections: 4096, Timeout: 5 * time.Second},
}

// ShortChaos is the test's version (`--short`): every scenario in a few seconds.
var ShortChaos = func() ChaosConfig {
	c := DefaultChaos
	c.Rate, c.Duration, c.FaultAt, c.FaultFor = 1000, 2*time.Second, 500*time.Millisecond, 800*time.Millisecond
	return c
}()

// requests is how many requests each scenario's burst sends.
func (c ChaosConfig) requests() int { return max(int(math.Round(c.Rate*c.Duration.Seconds())), 1) }

// Scenario is one fault, injected under a burst.
type Scenario struct {
	Name          string
	Fault         string // what happens, for the report; {d} is the fault's duration
	NoPersistence bool   // Redis without AOF (otherwise appendonly, everysec)
	TwoLedgers    bool   // two ledgers behind a TCP balancer; the proxy talks to the balancer
	// Inject starts the fault and returns what ends it (removes the toxics,
	// restarts what was killed). A fault that is over when Inject returns (a
	// restart) returns a nil end.
	Inject func(ctx context.Context, r *rig, d time.Duration) (end func() error, err error)
}

// Describe is the scenario's fault with its duration filled in.
func (s Scenario) Describe(d time.Duration) string {
	return strings.ReplaceAll(s.Fault, "{d}", d.String())
}

// Scenarios lists every fault the harness injects, in the order it runs them.
func Scenarios() []Scenario {
	redis := []string{linkProxyRedis, linkLedgerRedis}
	return []Scenario{
		{Name: "redis-latency", Fault: "+200 ms on every Redis reply to the proxy and the ledger (latency toxic) for {d}",
			Inject: toxic(redis, "latency", "downstream", map[string]any{"latency": 200})},
		{Name: "redis-reset", Fault: "Redis connections of the proxy and the ledger cut as replies come back (reset_peer toxic) for {d}: the script ran, its answer is lost",
			Inject: toxic(redis, "reset_peer", "downstream", map[string]any{"timeout": 0})},
		{Name: "redis-stall", Fault: "Redis replies held back (timeout toxic) for {d}, far past the proxy's REDIS_TIMEOUT of 250 ms; then the stalled connections are closed",
			Inject: toxic(redis, "timeout", "downstream", map[string]any{"timeout": 0})},
		{Name: "redis-kill-aof", Fault: "kill -9 Redis (appendonly yes, appendfsync everysec), down for {d}, restarted from its AOF",
			Inject: killRedis},
		{Name: "redis-kill-empty", NoPersistence: true, Fault: "kill -9 Redis without persistence, down for {d}, restarted empty",
			Inject: killRedis},
		{Name: "pg-restart", Fault: "Postgres restarted: fast shutdown (open transactions roll back, connections cut) and start",
			Inject: restartPostgres},
		{Name: "pg-reset", Fault: "ledger->Postgres connections cut as replies come back, mid-transaction and mid-COMMIT (reset_peer toxic) for {d}",
			Inject: toxic([]string{linkLedgerPG}, "reset_peer", "downstream", map[string]any{"timeout": 0})},
		{Name: "ledger-kill", Fault: "kill -9 the ledger with writes in flight, down for {d}, restarted",
			Inject: kill(func(r *rig) *devstack.Service { return r.st.Ledger })},
		{Name: "ledger-pair-kill", TwoLedgers: true, Fault: "two ledgers behind a TCP balancer the proxy talks to; kill -9 one, down for {d}, restarted",
			Inject: kill(func(r *rig) *devstack.Service { return r.ledgerB })},
		{Name: "proxy-kill", Fault: "kill -9 the proxy with requests in flight, down for {d}, restarted",
			Inject: kill(func(r *rig) *devstack.Service { return r.st.Proxy })},
	}
}

// ScenarioNames lists the scenarios' names.
func ScenarioNames() []string {
	var names []string
	for _, s := range Scenarios() {
		names = append(names, s.Name)
	}
	return names
}

// toxic switches one toxic on over links, and off again at the end.
func toxic(links []string, typ, stream string, attrs map[string]any) func(context.Context, *rig, time.Duration) (func() error, error) {
	return func(ctx context.Context, r *rig, _ time.Duration) (func() error, error) {
		for _, l := range links {
			if err := r.net.AddToxic(l, typ, stream, attrs); err != nil {
				r.net.Heal(ctx)
				return nil, err
			}
		}
		return func() error { r.net.Heal(ctx); return nil }, nil
	}
}

func killRedis(_ context.Context, r *rig, _ time.Duration) (func() error, error) {
	if err := r.redis.Kill(); err != nil {
		return nil, err
	}
	return r.redis.Restart, nil
}

func restartPostgres(_ context.Context, r *rig, _ time.Duration) (func() error, error) {
	return nil, r.pg.Restart()
}

// kill kills -9 the service which picks and restarts it at the end.
func kill(which func(*rig) *devstack.Service) func(context.Context, *rig, time.Duration) (func() error, error) {
	return func(_ context.Context, r *rig, _ time.Duration) (func() error, error) {
		svc := which(r)
		if svc == nil {
			return nil, errors.New("no such service in this scenario")
		}
		if err := svc.Kill(); err != nil {
			return nil, err
		}
		return svc.Restart, nil
	}
}

// faultNet is toxiproxy embedded in this process: one TCP proxy per link, on
// which toxics (latency, resets, stalls) are switched on and off.
type faultNet struct {
	server *toxiproxy.ApiServer
}

func newFaultNet() *faultNet {
	return &faultNet{server: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())}
}

// Link starts a proxy named name in front of upstream and returns the address
// it listens on.
func (f *faultNet) Link(name, upstream string) (string, error) {
	p := toxiproxy.NewProxy(f.server, name, "127.0.0.1:0", upstream)
	if err := f.server.Collection.Add(p, true); err != nil {
		return "", fmt.Errorf("toxiproxy %s: %w", name, err)
	}
	return p.Listen, nil
}

// AddToxic switches a toxic on: typ is toxiproxy's name for it ("latency",
// "reset_peer", "timeout"), stream "upstream" (towards the server) or
// "downstream" (its replies).
func (f *faultNet) AddToxic(link, typ, stream string, attrs map[string]any) error {
	p, err := f.server.Collection.Get(link)
	if err != nil {
		return fmt.Errorf("toxiproxy %s: %w", link, err)
	}
	body, err := json.Marshal(map[string]any{
		"name": typ + "_" + stream, "type": typ, "stream": stream, "toxicity": 1.0, "attributes": attrs,
	})
	if err != nil {
		return err
	}
	if _, err := p.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
		return fmt.Errorf("toxiproxy %s: add %s: %w", link, typ, err)
	}
	return nil
}

// Heal removes every toxic from every link. A timeout toxic closes the
// connections it stalled as it goes.
func (f *faultNet) Heal(ctx context.Context) {
	for _, p := range f.server.Collection.Proxies() {
		p.Toxics.ResetToxics(ctx)
	}
}

// Close stops every link and closes its connections.
func (f *faultNet) Close() { _ = f.server.Collection.Clear() }

// balancer spreads TCP connections round-robin over backends and skips one
// that refuses, as a load balancer in front of several ledgers would.
type balancer struct {
	ln       net.Listener
	backends []string
	next     atomic.Uint64

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func startBalancer(backends ...string) (*balancer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("balancer: %w", err)
	}
	b := &balancer{ln: ln, backends: backends, conns: map[net.Conn]struct{}{}}
	b.wg.Add(1)
	go b.serve()
	return b, nil
}

// Addr is where the balancer listens.
func (b *balancer) Addr() string { return b.ln.Addr().String() }

func (b *balancer) serve() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.wg.Add(1)
		go b.handle(c)
	}
}

func (b *balancer) handle(c net.Conn) {
	defer b.wg.Done()
	var up net.Conn
	first := b.next.Add(1)
	for i := range len(b.backends) {
		addr := b.backends[(first+uint64(i))%uint64(len(b.backends))]
		var err error
		if up, err = net.DialTimeout("tcp", addr, time.Second); err == nil {
			break
		}
	}
	if up == nil || !b.track(c, up) {
		c.Close()
		if up != nil {
			up.Close()
		}
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done // either side ended: end both, as a proxy does
	c.Close()
	up.Close()
	<-done
	b.mu.Lock()
	delete(b.conns, c)
	delete(b.conns, up)
	b.mu.Unlock()
}

func (b *balancer) track(cs ...net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	for _, c := range cs {
		b.conns[c] = struct{}{}
	}
	return true
}

// Close stops accepting, cuts every connection and waits for the copies.
func (b *balancer) Close() {
	b.ln.Close()
	b.mu.Lock()
	b.closed = true
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// rig is one scenario's system: a Redis of its own, a database of its own on
// the shared Postgres server, the ledger(s) and the proxy with their Redis and
// Postgres traffic routed through toxiproxy, and a Bench that reads the
// servers directly.
type rig struct {
	pg      *devstack.Postgres
	redis   *devstack.Redis
	net     *faultNet
	lb      *balancer
	st      *Stack
	ledgerB *devstack.Service // the second ledger of a two-ledger scenario
	bench   *Bench
	dbName  string
}

func startRig(ctx context.Context, pg *devstack.Postgres, sc Scenario, cfg ChaosConfig) (r *rig, err error) {
	r = &rig{pg: pg}
	defer func() {
		if err != nil {
			r.Close(ctx)
		}
	}()
	r.dbName = fmt.Sprintf("chaos_%s_%d", strings.ReplaceAll(sc.Name, "-", "_"), codeSeq.Add(1))
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
		if addrs[name], err = r.net.Link(name, upstream); err != nil {
			return r, err
		}
	}
	o := StackOptions{
		BinDir: cfg.BinDir, Token: chaosToken, ExternalDB: dbURL, ExternalRDB: r.redis.URL(),
		LedgerDBURL:    withHost(dbURL, addrs[linkLedgerPG]),
		LedgerRedisURL: "redis://" + addrs[linkLedgerRedis] + "/0",
		ProxyRedisURL:  "redis://" + addrs[linkProxyRedis] + "/0",
		LedgerEnv:      chaosLedgerEnv, ProxyEnv: chaosProxyEnv,
	}
	var addrB string
	if sc.TwoLedgers {
		if o.LedgerAddr, err = addrOr(""); err != nil {
			return r, err
		}
		if addrB, err = addrOr(""); err != nil {
			return r, err
		}
		if r.lb, err = startBalancer(o.LedgerAddr, addrB); err != nil {
			return r, err
		}
		o.ProxyLedgerURL = "http://" + r.lb.Addr()
	}
	withServiceLog(cfg.ServiceLog, func() {
		if r.st, err = StartStack(o); err != nil || !sc.TwoLedgers {
			return
		}
		r.ledgerB, _, err = r.st.StartLedger("ledger-b", addrB)
	})
	if err != nil {
		return r, err
	}
	r.bench, err = OpenBench(ctx, r.st.Endpoints())
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

// withServiceLog runs start with os.Stderr pointing at f: devstack copies a
// service's output to whatever os.Stderr is when it starts the service, for
// the service's whole life, restarts included.
func withServiceLog(f *os.File, start func()) {
	if f == nil {
		start()
		return
	}
	stderr := os.Stderr
	os.Stderr = f
	defer func() { os.Stderr = stderr }()
	start()
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

// ChaosResult is one scenario's figures and verdicts.
type ChaosResult struct {
	Scenario     string  `json:"scenario"`
	Fault        string  `json:"fault"`
	Code         string  `json:"voucher"`
	ProbeCode    string  `json:"probeVoucher"`
	Stock        int     `json:"stock"`
	FaultAt      float64 `json:"faultAtSeconds"` // into the burst
	FaultSeconds float64 `json:"faultSeconds"`   // from injection until the dependency was back
	Rate         float64 `json:"requestedRate"`  // of the burst
	Achieved     float64 `json:"achievedRate"`   // of the burst

	// Every request, of the burst and the probes, and so every one checked.
	Requests       int            `json:"requests"`
	Probes         int            `json:"probes"`
	RetryingOrders int            `json:"retryingOrders"` // orders of the clients that retry their 503s
	RetryingSends  int            `json:"retryingSends"`  // and their requests, first sends included
	Created        int            `json:"answers201"`
	Refused        int            `json:"answers409"` // 409 and 422
	Unavailable    int            `json:"answers503"`
	Errors         int            `json:"errors"` // no answer (transport error, timeout) or another status
	Statuses       map[string]int `json:"statuses"`
	ErrorSamples   []string       `json:"errorSamples,omitempty"`

	// Answers to requests sent while the fault lasted.
	DuringFault       int     `json:"duringFault"`
	DuringFault201    int     `json:"duringFault201"`
	DuringFault503    int     `json:"duringFault503"`
	DuringFault503P99 float64 `json:"duringFault503P99Ms"`
	DuringFault503Max float64 `json:"duringFault503MaxMs"`

	// RecoverySeconds: after the fault ended, until the first of
	// probesInARow answered probes in a row came back; -1 when it never did.
	RecoverySeconds float64 `json:"recoverySeconds"`
	RecoveryBound   float64 `json:"recoveryBoundSeconds"`
	// SettleSeconds: after the last request, until Redis agreed exactly with
	// the database on both vouchers; -1 when it never did.
	SettleSeconds float64 `json:"settleSeconds"`
	SettleBound   float64 `json:"settleBoundSeconds"`
	SettleDetail  string  `json:"settleDetail,omitempty"`

	DB             *DBSummary `json:"db,omitempty"`
	RedisRemaining *int64     `json:"redisRemaining,omitempty"`
	Checks         []Check    `json:"checks"`
	Pass           bool       `json:"pass"`
	Error          string     `json:"error,omitempty"` // the harness could not run the scenario
}

// RunScenario runs sc under a burst on a system of its own and judges it:
// invariants against the database and Redis, and recovery within the bounds.
func RunScenario(ctx context.Context, pg *devstack.Postgres, sc Scenario, cfg ChaosConfig) (*ChaosResult, error) {
	r, err := startRig(ctx, pg, sc, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: start the system: %w", sc.Name, err)
	}
	defer r.Close(ctx)

	n := cfg.requests()
	stock := cfg.Stock
	if stock <= 0 {
		stock = max(n*3/10, 1)
	}
	spec := VoucherSpec{Code: newCode(codePrefix(sc.Name)), Stock: stock, PerUser: 1, Flash: true}
	probeSpec := VoucherSpec{Code: newCode("probe"), Stock: probeStock, PerUser: 1, Flash: true}
	for _, v := range []VoucherSpec{spec, probeSpec} {
		if err := r.bench.CreateVoucher(ctx, v); err != nil {
			return nil, fmt.Errorf("%s: %w", sc.Name, err)
		}
	}
	// Customers below the order count: some order twice and meet their limit.
	customers := max(n*7/10, 1)
	plan := NewPlan(spec.Code, Crowd{Requests: n, Customers: customers, Retry: 0.10, Seed: cfg.Seed})

	volley := make(chan Volley, 1)
	rc := newRetryingClients(r.st.ProxyURL, spec.Code, int64(customers)+1, cfg.Attack.Timeout)
	retried := make(chan struct{})
	start := time.Now()
	go func() {
		volley <- Fire(ctx, r.st.ProxyURL+"/vouchers/"+spec.Code+"/reservations", plan, orderAmount, cfg.Rate, cfg.Attack)
	}()
	go func() {
		defer close(retried)
		rc.run(ctx, cfg.Rate*retryingShare, cfg.Duration)
	}()
	sleepCtx(ctx, time.Until(start.Add(cfg.FaultAt)))

	pr := newProber(r.st.ProxyURL, probeSpec.Code, cfg.RecoveryBound)
	go pr.run(ctx)
	faultStart := time.Now()
	end, faultErr := sc.Inject(ctx, r, cfg.FaultFor)
	if faultErr == nil && end != nil {
		sleepCtx(ctx, time.Until(faultStart.Add(cfg.FaultFor)))
		faultErr = end()
	}
	faultEnd := time.Now()
	pr.faultEnded(faultEnd)
	v := <-volley
	<-retried
	probes := pr.wait()
	if faultErr != nil {
		return nil, fmt.Errorf("%s: inject the fault: %w", sc.Name, faultErr)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	quiet := time.Now()
	settled, settleDetail := waitSettled(ctx, r.bench, cfg.SettleBound, spec.Code, probeSpec.Code)

	res := &ChaosResult{
		Scenario: sc.Name, Fault: sc.Describe(cfg.FaultFor), Code: spec.Code, ProbeCode: probeSpec.Code, Stock: stock,
		FaultAt: faultStart.Sub(start).Seconds(), FaultSeconds: faultEnd.Sub(faultStart).Seconds(),
		Rate: cfg.Rate, Probes: len(probes), Statuses: map[string]int{},
		RecoveryBound: cfg.RecoveryBound.Seconds(), SettleBound: cfg.SettleBound.Seconds(),
		RecoverySeconds: -1, SettleSeconds: -1, SettleDetail: settleDetail,
	}
	_, rcShots := rc.merge(Plan{}, nil)
	res.tally(slices.Concat(v.Shots, rcShots), probes, faultStart, faultEnd)
	res.RetryingOrders, res.RetryingSends = len(rc.plan.Orders), len(rcShots)
	res.Achieved = summarize(BurstConfig{Label: sc.Name, Rate: cfg.Rate, Duration: cfg.Duration}, spec, plan, v).AchievedRate
	if at, ok := recoveredAt(probes, faultEnd, probesInARow); ok {
		res.RecoverySeconds = at.Sub(faultEnd).Seconds()
	}
	if settled >= 0 {
		res.SettleSeconds = settled.Seconds()
	}

	all, shots := rc.merge(plan, v.Shots)
	burst, err := chaosChecks(ctx, r.bench, spec, all, shots, "")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sc.Name, err)
	}
	probeChecks, err := chaosChecks(ctx, r.bench, probeSpec, pr.plan, probes, "probes: ")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sc.Name, err)
	}
	res.DB, res.RedisRemaining = burst.db, burst.redisRemaining
	res.Checks = append(burst.checks, probeChecks.checks...)
	recovered := res.RecoverySeconds >= 0 && res.RecoverySeconds <= res.RecoveryBound
	rec := fmt.Sprintf("never (probed for %s after the fault)", cfg.RecoveryBound)
	if res.RecoverySeconds >= 0 {
		rec = fmt.Sprintf("%.2f s", res.RecoverySeconds)
	}
	res.Checks = append(res.Checks, Check{Name: checkFast503,
		Pass: res.DuringFault503 == 0 || res.DuringFault503P99 <= float64(cfg.Fast503.Milliseconds()),
		Detail: fmt.Sprintf("%d answers 503 to requests sent while the fault lasted: p99 %.0f ms, max %.0f ms (bound: p99 within %s); %d requests sent meanwhile answered 201",
			res.DuringFault503, res.DuringFault503P99, res.DuringFault503Max, cfg.Fast503, res.DuringFault201)})
	res.Checks = append(res.Checks, Check{Name: checkRecovered, Pass: recovered,
		Detail: fmt.Sprintf("%d probes in a row answered %s after the fault ended (bound %s); %d probes, %d of them while the fault lasted",
			probesInARow, rec, cfg.RecoveryBound, len(probes), countSent(probes, faultStart, faultEnd))})
	set := fmt.Sprintf("never within %s", cfg.SettleBound)
	if res.SettleSeconds >= 0 {
		set = fmt.Sprintf("%.2f s", res.SettleSeconds)
	}
	res.Checks = append(res.Checks, Check{Name: checkSettled, Pass: settled >= 0,
		Detail: fmt.Sprintf("remaining and held orders equal on both vouchers %s after the last request (%.2f s after the fault ended; bound %s)%s",
			set, quiet.Sub(faultEnd).Seconds()+max(res.SettleSeconds, 0), cfg.SettleBound, suffix(settleDetail))})
	res.Pass = Passed(res.Checks)
	return res, nil
}

// The checks on how the system behaved through the fault, beside the
// invariants.
const (
	checkFast503   = "fast 503 while the fault lasted"
	checkRecovered = "reserves answered again"
	checkSettled   = "Redis = DB, exactly, on its own"
)

func suffix(s string) string {
	if s == "" {
		return ""
	}
	return "; last seen: " + s
}

// tally counts the answers of the burst and the probes.
func (res *ChaosResult) tally(burst, probes []Shot, faultStart, faultEnd time.Time) {
	seen := map[string]bool{}
	var slow []time.Duration
	for _, s := range slices.Concat(burst, probes) {
		res.Requests++
		res.Statuses[statusKey(s)]++
		switch {
		case s.Status == http.StatusCreated:
			res.Created++
		case s.Status == http.StatusConflict || s.Status == http.StatusUnprocessableEntity:
			res.Refused++
		case s.Status == http.StatusServiceUnavailable:
			res.Unavailable++
		case s.Failed():
			res.Errors++
			msg := cmp.Or(s.Err, statusKey(s))
			if !seen[msg] && len(res.ErrorSamples) < 5 {
				seen[msg] = true
				res.ErrorSamples = append(res.ErrorSamples, msg)
			}
		}
		if s.At.Before(faultStart) || s.At.After(faultEnd) {
			continue
		}
		res.DuringFault++
		switch s.Status {
		case http.StatusCreated:
			res.DuringFault201++
		case http.StatusServiceUnavailable:
			res.DuringFault503++
			slow = append(slow, s.Latency)
		}
	}
	l := LatencyOf(slow)
	res.DuringFault503P99, res.DuringFault503Max = l.P99, l.Max
}

func countSent(shots []Shot, from, to time.Time) int {
	n := 0
	for _, s := range shots {
		if !s.At.Before(from) && !s.At.After(to) {
			n++
		}
	}
	return n
}

// judged is one voucher's checks and final state.
type judged struct {
	checks         []Check
	db             *DBSummary
	redisRemaining *int64
}

// chaosChecks judges one voucher after a scenario: the burst's checks (see
// Checks), with "retries answered alike" made aware of time, plus an exact
// per-customer count. name prefixes every check's name.
func chaosChecks(ctx context.Context, b *Bench, spec VoucherSpec, plan Plan, shots []Shot, name string) (judged, error) {
	o := Outcome{Spec: spec, Plan: plan, Shots: shots}
	for _, s := range shots {
		if s.Failed() {
			o.Errors++
		}
	}
	var err error
	if o.DB, err = b.DBState(ctx, spec.Code); err != nil {
		return judged{}, err
	}
	j := judged{db: &DBSummary{TotalLimit: o.DB.TotalLimit, Used: o.DB.Used, Active: len(o.DB.Active),
		Remaining: o.DB.TotalLimit - o.DB.Used, ByStatus: o.DB.ByStatus}}
	st, loaded, err := b.RedisState(ctx, spec.Code)
	if err != nil {
		return judged{}, err
	}
	if loaded {
		o.Redis = &st
		j.redisRemaining = &st.Remaining
	}
	for _, c := range Checks(o) {
		if c.Name == "retries answered alike" {
			c = retriesAnsweredAlike(o)
		}
		j.checks = append(j.checks, c)
	}
	j.checks = append(j.checks, refusalsHoldNothing(o))
	bad, err := usageMismatches(ctx, b, spec.Code)
	if err != nil {
		return judged{}, err
	}
	j.checks = append(j.checks, Check{Name: "retries consumed nothing", Pass: bad == 0 && o.DB.Used == len(o.DB.Active),
		Detail: fmt.Sprintf("%d customers whose voucher_customer_usage count differs from their RESERVED/CONFIRMED rows; used_count %d, active rows %d (order_id is UNIQUE)",
			bad, o.DB.Used, len(o.DB.Active))})
	for i := range j.checks {
		j.checks[i].Name = name + j.checks[i].Name
	}
	return j, nil
}

// retriesAnsweredAlike is Checks' "retries answered alike" with time in it.
// Under faults a use held for an unanswered request comes back when the
// reconciler frees it, so an order refused OUT_OF_STOCK or ALREADY_USED may be
// admitted by a later retry: that is one use, sold late, and is counted, not
// failed. What must never happen is a refusal for a request sent after a 201
// for the same order came back: the order holds its use.
func retriesAnsweredAlike(o Outcome) Check {
	ok := firstAdmitted(o)
	var after []string
	late := map[int32]bool{}
	for _, s := range o.Shots {
		ord, refused := refusedOrder(o.Plan, s)
		if !refused {
			continue
		}
		t, admitted := ok[ord]
		switch {
		case !admitted:
		case s.At.After(t):
			after = append(after, o.Plan.Orders[ord].ID)
		default:
			late[ord] = true
		}
	}
	return Check{Name: "retries answered alike", Pass: len(after) == 0,
		Detail: fmt.Sprintf("%d retries; %d refusals sent after the order's 201 came back%s; %d orders refused earlier and admitted by a later retry once a held use came back",
			o.Plan.Retries, len(after), histories(o, after), len(late))}
}

// refusalsHoldNothing checks that no order whose last answer was a refusal
// holds a use in the database: the client was told "no", so it will not pay,
// and its use would be held until the reservation expires.
func refusalsHoldNothing(o Outcome) Check {
	last := map[int32]Shot{} // order -> its last answered request, by send time
	for _, s := range o.Shots {
		if s.Failed() || s.Req < 0 || int(s.Req) >= len(o.Plan.Requests) {
			continue
		}
		ord := o.Plan.Requests[s.Req]
		if l, seen := last[ord]; !seen || s.At.After(l.At) {
			last[ord] = s
		}
	}
	var bad []string
	refused := 0
	for ord, s := range last {
		if _, no := refusedOrder(o.Plan, s); !no {
			continue
		}
		refused++
		if _, held := o.DB.Active[o.Plan.Orders[ord].ID]; held {
			bad = append(bad, o.Plan.Orders[ord].ID)
		}
	}
	return Check{Name: "refused orders hold no use", Pass: len(bad) == 0,
		Detail: fmt.Sprintf("%d orders whose last answer was a refusal; %d of them RESERVED/CONFIRMED in the database%s",
			refused, len(bad), histories(o, bad))}
}

// firstAdmitted maps each order answered 201 to when its first 201 came back.
func firstAdmitted(o Outcome) map[int32]time.Time {
	ok := map[int32]time.Time{}
	for _, s := range o.Shots {
		if s.Status != http.StatusCreated || s.Req < 0 || int(s.Req) >= len(o.Plan.Requests) {
			continue
		}
		ord, at := o.Plan.Requests[s.Req], s.At.Add(s.Latency)
		if t, seen := ok[ord]; !seen || at.Before(t) {
			ok[ord] = at
		}
	}
	return ok
}

// refusedOrder returns the order of a shot answered 409 or 422.
func refusedOrder(p Plan, s Shot) (int32, bool) {
	if (s.Status != http.StatusConflict && s.Status != http.StatusUnprocessableEntity) ||
		s.Req < 0 || int(s.Req) >= len(p.Requests) {
		return 0, false
	}
	return p.Requests[s.Req], true
}

// histories shows what each of up to three orders was answered, in send
// order, with times from the first request of the burst: "X: 503 at 0.61 s,
// 201 at 0.80 s (back at 0.85 s), 409 OUT_OF_STOCK at 1.20 s". Transport
// errors carry no order and are not shown.
func histories(o Outcome, ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	var t0 time.Time
	for _, s := range o.Shots {
		if t0.IsZero() || s.At.Before(t0) {
			t0 = s.At
		}
	}
	index := map[string]int32{}
	for i, ord := range o.Plan.Orders {
		index[ord.ID] = int32(i)
	}
	var parts []string
	for _, id := range ids[:min(3, len(ids))] {
		var shots []Shot
		for _, s := range o.Shots {
			if s.Req >= 0 && int(s.Req) < len(o.Plan.Requests) && o.Plan.Requests[s.Req] == index[id] {
				shots = append(shots, s)
			}
		}
		slices.SortFunc(shots, func(a, b Shot) int { return a.At.Compare(b.At) })
		var h []string
		for _, s := range shots {
			h = append(h, fmt.Sprintf("%s sent at %.3f s, back at %.3f s", statusKey(s),
				s.At.Sub(t0).Seconds(), s.At.Add(s.Latency).Sub(t0).Seconds()))
		}
		parts = append(parts, id+": "+strings.Join(h, ", "))
	}
	return "; e.g. " + strings.Join(parts, "; ")
}

// usageMismatches counts the customers of a voucher whose use count differs
// from their RESERVED and CONFIRMED rows: a retry that took a second use
// would show here.
func usageMismatches(ctx context.Context, b *Bench, code string) (int, error) {
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

// waitSettled polls until Redis agrees exactly with the database on every
// code (remaining, and the orders holding uses) and returns how long that
// took, or -1 and what it saw last when bound passed first.
func waitSettled(ctx context.Context, b *Bench, bound time.Duration, codes ...string) (time.Duration, string) {
	start := time.Now()
	var last string
	for {
		last = ""
		for _, code := range codes {
			if diff := settledDiff(ctx, b, code); diff != "" {
				last = code + ": " + diff
				break
			}
		}
		if last == "" {
			return time.Since(start), ""
		}
		if time.Since(start) > bound || ctx.Err() != nil {
			return -1, last
		}
		sleepCtx(ctx, settlePolling)
	}
}

// settledDiff says how Redis differs from the database for code, or "" when
// it does not.
func settledDiff(ctx context.Context, b *Bench, code string) string {
	d, err := b.DBState(ctx, code)
	if err != nil {
		return err.Error()
	}
	st, loaded, err := b.RedisState(ctx, code)
	switch {
	case err != nil:
		return err.Error()
	case !loaded:
		return "not loaded in Redis"
	case st.Remaining != int64(d.TotalLimit-d.Used):
		return fmt.Sprintf("Redis remaining %d, DB remaining %d", st.Remaining, d.TotalLimit-d.Used)
	}
	held := 0
	for _, o := range st.Orders {
		if c, ok := d.Active[o.OrderID]; ok && c == o.CustomerID {
			held++
		}
	}
	if held != len(d.Active) || len(st.Orders) != len(d.Active) {
		return fmt.Sprintf("Redis holds %d orders, %d of them active in the DB; DB has %d active", len(st.Orders), held, len(d.Active))
	}
	return ""
}

// prober sends one reserve at a time to its own voucher, from the start of
// the fault until it sees the system answer probesInARow in a row after the
// fault ended, or until bound after the fault ended. Every probe is a new
// order of a new customer, so every answered probe should be a 201.
type prober struct {
	url, code string
	bound     time.Duration
	client    *http.Client
	end       atomic.Int64 // when the fault ended (UnixNano); 0 while it lasts
	done      chan struct{}

	plan  Plan   // owned by run until done
	shots []Shot // in send order
}

func newProber(proxyURL, code string, bound time.Duration) *prober {
	return &prober{
		url: proxyURL + "/vouchers/" + code + "/reservations", code: code, bound: bound,
		client: &http.Client{Timeout: probeTimeout}, done: make(chan struct{}),
	}
}

func (p *prober) faultEnded(t time.Time) { p.end.Store(t.UnixNano()) }

// wait returns the probes once run has finished.
func (p *prober) wait() []Shot {
	<-p.done
	return p.shots
}

func (p *prober) run(ctx context.Context) {
	defer close(p.done)
	defer p.client.CloseIdleConnections()
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for i := 0; ctx.Err() == nil; i++ {
		if e := p.end.Load(); e != 0 {
			end := time.Unix(0, e)
			if _, ok := recoveredAt(p.shots, end, probesInARow); ok || time.Since(end) > p.bound {
				return
			}
		}
		p.shoot(ctx, i)
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}

func (p *prober) shoot(ctx context.Context, i int) {
	o := Order{ID: fmt.Sprintf("%s-p%d", p.code, i), Customer: int64(i + 1)}
	p.plan.Orders = append(p.plan.Orders, o)
	p.plan.Requests = append(p.plan.Requests, int32(i))
	s, _ := postReserve(ctx, p.client, p.url, o)
	s.Seq, s.Req = uint64(i), int32(i)
	p.shots = append(p.shots, s)
}

// postReserve sends one reserve for o and returns its answer, with the
// Retry-After of a 503 (0 when none).
func postReserve(ctx context.Context, client *http.Client, url string, o Order) (Shot, time.Duration) {
	s := Shot{Req: -1, At: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(reserveBody(o, orderAmount)))
	if err != nil {
		s.Err = err.Error()
		return s, 0
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		s.Latency, s.Err = time.Since(s.At), err.Error()
		return s, 0
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	s.Latency = time.Since(s.At)
	if err != nil {
		s.Err = err.Error()
		return s, 0
	}
	s.Status = uint16(resp.StatusCode)
	if s.Status == http.StatusCreated {
		s.OrderID = jsonString(raw, "orderId")
	} else if s.Status >= 300 {
		s.Code = jsonString(raw, "error")
	}
	var wait time.Duration
	if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && n > 0 {
		wait = time.Duration(n) * time.Second
	}
	return s, wait
}

// retryingClients are customers who do what the API asks of them: each
// sends one new order and, while the answer is a 503 or no answer at all,
// sends the same order again after the Retry-After the proxy asked for (a
// second when there was no answer), up to retryAttempts times. They run beside
// the burst on its voucher, each order from a customer of its own (the
// burst's customers would mostly meet their limit in Redis at once), so that
// their retries meet the fault and the sell-out.
type retryingClients struct {
	url           string
	code          string
	firstCustomer int64
	client        *http.Client

	mu    sync.Mutex
	plan  Plan
	shots []Shot
}

const (
	retryAttempts   = 5
	retryClientWait = time.Second // after no answer at all
)

func newRetryingClients(proxyURL, code string, firstCustomer int64, timeout time.Duration) *retryingClients {
	return &retryingClients{
		url: proxyURL + "/vouchers/" + code + "/reservations", code: code, firstCustomer: firstCustomer,
		client: &http.Client{Timeout: timeout, Transport: &http.Transport{MaxIdleConnsPerHost: 256}},
	}
}

// run starts a new order every 1/rate for d and returns when every order has
// its answer or has used its attempts.
func (rc *retryingClients) run(ctx context.Context, rate float64, d time.Duration) {
	defer rc.client.CloseIdleConnections()
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Duration(float64(time.Second) / max(rate, 1)))
	defer tick.Stop()
	for end, k := time.Now().Add(d), 0; time.Now().Before(end) && ctx.Err() == nil; k++ {
		// "." never appears in the burst's orderIds (code-<base 36>).
		o := Order{ID: fmt.Sprintf("%s.r%s", rc.code, strconv.FormatInt(int64(k), 36)), Customer: rc.firstCustomer + int64(k)}
		rc.mu.Lock()
		rc.plan.Orders = append(rc.plan.Orders, o)
		idx := int32(len(rc.plan.Orders) - 1)
		rc.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc.order(ctx, idx, o)
		}()
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	wg.Wait()
}

func (rc *retryingClients) order(ctx context.Context, idx int32, o Order) {
	for attempt := 0; attempt < retryAttempts && ctx.Err() == nil; attempt++ {
		s, wait := postReserve(ctx, rc.client, rc.url, o)
		rc.mu.Lock()
		rc.plan.Requests = append(rc.plan.Requests, idx)
		s.Req = int32(len(rc.plan.Requests) - 1)
		if attempt > 0 {
			rc.plan.Retries++
		}
		rc.shots = append(rc.shots, s)
		rc.mu.Unlock()
		if !s.Failed() {
			return
		}
		sleepCtx(ctx, cmp.Or(wait, retryClientWait))
	}
}

// merge appends the clients' orders, requests and answers to a burst's.
func (rc *retryingClients) merge(p Plan, shots []Shot) (Plan, []Shot) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	orders, requests := int32(len(p.Orders)), int32(len(p.Requests))
	out := Plan{Orders: slices.Concat(p.Orders, rc.plan.Orders), Retries: p.Retries + rc.plan.Retries,
		Requests: slices.Clone(p.Requests)}
	for _, o := range rc.plan.Requests {
		out.Requests = append(out.Requests, o+orders)
	}
	all := slices.Clone(shots)
	for _, s := range rc.shots {
		if s.Req >= 0 {
			s.Req += requests
		}
		all = append(all, s)
	}
	return out, all
}

// recoveredAt returns when the first of k answered probes in a row, all sent
// at or after end, came back. An answer is anything but "no answer" and 5xx
// (see Shot.Failed): a refusal is an answer, which the invariants judge.
func recoveredAt(shots []Shot, end time.Time, k int) (time.Time, bool) {
	run := 0
	var first time.Time
	for _, s := range shots {
		if s.At.Before(end) {
			continue
		}
		if s.Failed() {
			run = 0
			continue
		}
		if run == 0 {
			first = s.At.Add(s.Latency)
		}
		if run++; run == k {
			return first, true
		}
	}
	return time.Time{}, false
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// ChaosReport is chaos.json.
type ChaosReport struct {
	Started  time.Time      `json:"started"`
	Seconds  float64        `json:"seconds"`
	Command  string         `json:"command"`
	CPUs     int            `json:"cpus"`
	LoadAvg  float64        `json:"loadAvg1AtStart"`
	Config   map[string]any `json:"config"`
	Results  []*ChaosResult `json:"results"`
	Pass     bool           `json:"pass"`
	Verdicts string         `json:"verdicts"` // "10 of 10 scenarios passed"
}

func newChaosReport(cfg ChaosConfig, command string) *ChaosReport {
	return &ChaosReport{
		Started: time.Now(), Command: command, CPUs: runtime.NumCPU(), LoadAvg: loadAvg(),
		Config: map[string]any{
			"rate": cfg.Rate, "durationSeconds": cfg.Duration.Seconds(), "requestsPerScenario": cfg.requests(),
			"faultAtSeconds": cfg.FaultAt.Seconds(), "faultForSeconds": cfg.FaultFor.Seconds(),
			"stock": cfg.Stock, "recoveryBoundSeconds": cfg.RecoveryBound.Seconds(),
			"settleBoundSeconds": cfg.SettleBound.Seconds(), "fast503Seconds": cfg.Fast503.Seconds(),
			"clientTimeoutSeconds": cfg.Attack.Timeout.Seconds(),
			"ledgerEnv":            chaosLedgerEnv, "proxyEnv": chaosProxyEnv, "seed": cfg.Seed,
		},
	}
}

func (rep *ChaosReport) finish() {
	rep.Seconds = time.Since(rep.Started).Seconds()
	passed := 0
	for _, r := range rep.Results {
		if r.Pass {
			passed++
		}
	}
	rep.Pass = passed == len(rep.Results)
	rep.Verdicts = fmt.Sprintf("%d of %d scenarios passed", passed, len(rep.Results))
}

// PrintChaosTable writes one line per scenario.
func PrintChaosTable(w io.Writer, results []*ChaosResult) {
	fmt.Fprintf(w, "%-17s %6s %8s %6s %6s %6s %6s %8s %-10s %9s %8s %s\n",
		"scenario", "fault", "requests", "201", "409", "503", "errors", "503 p99", "invariants", "recovered", "Redis=DB", "verdict")
	for _, r := range results {
		fmt.Fprintf(w, "%-17s %5.1fs %8d %6d %6d %6d %6d %8s %-10s %9s %8s %s\n",
			r.Scenario, r.FaultSeconds, r.Requests, r.Created, r.Refused, r.Unavailable, r.Errors,
			p99Of503(r), invariantsVerdict(r), seconds(r.RecoverySeconds), seconds(r.SettleSeconds), verdict(r.Pass))
	}
}

// invariantsVerdict is PASS or FAIL over the checks that are invariants
// (all but the three on behaviour through the fault), or ERROR when the
// scenario did not run.
func invariantsVerdict(r *ChaosResult) string {
	if r.Error != "" {
		return "ERROR"
	}
	for _, c := range r.Checks {
		if !c.Pass && c.Name != checkFast503 && c.Name != checkRecovered && c.Name != checkSettled {
			return "FAIL"
		}
	}
	return "PASS"
}

func seconds(s float64) string {
	if s < 0 {
		return "never"
	}
	return fmt.Sprintf("%.2fs", s)
}

// p99Of503 is the p99 of the 503s sent while the fault lasted, or "-".
func p99Of503(r *ChaosResult) string {
	if r.DuringFault503 == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0fms", r.DuringFault503P99)
}

// WriteChaosReport writes chaos.md and chaos.json into dir.
func WriteChaosReport(dir string, rep *ChaosReport) (md, js string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	js = filepath.Join(dir, "chaos.json")
	raw, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return "", "", err
	}
	if err := os.WriteFile(js, raw, 0o644); err != nil {
		return "", "", err
	}
	md = filepath.Join(dir, "chaos.md")
	return md, js, os.WriteFile(md, []byte(chaosMarkdown(rep)), 0o644)
}

func secondsOf(v any) string { return fmt.Sprintf("%v s", v) }

func chaosMarkdown(rep *ChaosReport) string {
	var b strings.Builder
	c := rep.Config
	fmt.Fprintf(&b, "# flashgate chaos run, %s\n\n", rep.Started.Format(time.RFC3339))
	fmt.Fprintf(&b, "`%s`: %s in %.0f s. Each scenario ran on a fresh Redis, database, ledger and proxy "+
		"(Postgres server shared), under a burst of %v requests at %v/s (open model; a flash voucher for 30%% of "+
		"the requests; 10%% of the requests resend an earlier orderId; customers ordering twice against a limit of 1), "+
		"beside it clients that retry: %.0f%% more new orders, each sent again after the proxy's Retry-After while the "+
		"answer is a 503 or nothing, up to %d times; the fault %vs into the burst for %vs; and a probe sending one new "+
		"reserve every %s to a voucher of its own from the fault on. Ledger: %s. Proxy: %s. Client timeout %vs.\n\n",
		rep.Command, rep.Verdicts, rep.Seconds, c["requestsPerScenario"], c["rate"], 100*retryingShare, retryAttempts,
		c["faultAtSeconds"], c["faultForSeconds"], probeEvery, strings.Join(chaosLedgerEnv, ", "),
		strings.Join(chaosProxyEnv, ", "), c["clientTimeoutSeconds"])
	fmt.Fprintf(&b, "The machine has %d CPUs and is shared (1-minute load average %.1f at the start): the load "+
		"generator, toxiproxy, Redis, Postgres, the ledger and the proxy all run on it, so the figures are this "+
		"machine's at that moment.\n\n", rep.CPUs, rep.LoadAvg)
	b.WriteString("| scenario | fault lasted | requests | 201 | 409 | 503 | errors | 503 p99 in fault | invariants | reserves answered again | Redis = DB | verdict |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |\n")
	for _, r := range rep.Results {
		fmt.Fprintf(&b, "| %s | %.1f s | %d | %d | %d | %d | %d | %s | %s | %s | %s | %s |\n",
			r.Scenario, r.FaultSeconds, r.Requests, r.Created, r.Refused, r.Unavailable, r.Errors,
			p99Of503(r), invariantsVerdict(r), seconds(r.RecoverySeconds), seconds(r.SettleSeconds), verdict(r.Pass))
	}
	fmt.Fprintf(&b, "\nBounds: reserves answered again within %s of the fault's end; Redis = DB within %s of the last request; "+
		"p99 of the 503s sent during the fault within %s.\n", secondsOf(c["recoveryBoundSeconds"]), secondsOf(c["settleBoundSeconds"]), secondsOf(c["fast503Seconds"]))
	b.WriteString("\n*reserves answered again*: after the fault ended (toxic removed, process restarted and healthy), until the first of " +
		fmt.Sprint(probesInARow) + " probes in a row came back answered. *Redis = DB*: after the last request, until Redis held " +
		"exactly the database's remaining and orders on both vouchers, with only the ledger's own reconciler at work. " +
		"*errors*: no answer (transport error, timeout) or a status other than 2xx/409/422/503.\n")
	for _, r := range rep.Results {
		fmt.Fprintf(&b, "\n## %s: %s\n\n", r.Scenario, verdict(r.Pass))
		fmt.Fprintf(&b, "%s. The fault started %.2f s into the burst and lasted %.2f s.\n\n", r.Fault, r.FaultAt, r.FaultSeconds)
		if r.Error != "" {
			fmt.Fprintf(&b, "The harness could not run it: %s\n", r.Error)
			continue
		}
		fmt.Fprintf(&b, "Burst voucher %s (%d uses), probe voucher %s. Requested %.0f/s, achieved %.0f/s; "+
			"the retrying clients sent %d orders in %d requests; %d probes. "+
			"Answers: %s. While the fault lasted: %d requests, %d answered 201, %d answered 503 (p99 %.0f ms, max %.0f ms).\n\n",
			r.Code, r.Stock, r.ProbeCode, r.Rate, r.Achieved, r.RetryingOrders, r.RetryingSends, r.Probes,
			statusLine(r.Statuses), r.DuringFault, r.DuringFault201, r.DuringFault503, r.DuringFault503P99, r.DuringFault503Max)
		if len(r.ErrorSamples) > 0 {
			fmt.Fprintf(&b, "Errors seen: %s.\n\n", strings.Join(r.ErrorSamples, "; "))
		}
		for _, c := range r.Checks {
			fmt.Fprintf(&b, "- %s %s: %s\n", verdict(c.Pass), c.Name, c.Detail)
		}
	}
	return b.String()
}

// runChaos is `loadtest chaos`.
func runChaos(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("chaos", flag.ExitOnError)
	cfg := DefaultChaos
	var picked multiFlag
	fs.Var(&picked, "scenario", "run this scenario (repeatable; default all): "+strings.Join(ScenarioNames(), ", "))
	short := fs.Bool("short", false, fmt.Sprintf("the test's durations (%.0f req/s for %s, fault at %s for %s) unless given",
		ShortChaos.Rate, ShortChaos.Duration, ShortChaos.FaultAt, ShortChaos.FaultFor))
	list := fs.Bool("list", false, "list the scenarios and exit")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "burst requests per second")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "burst length per scenario")
	fs.DurationVar(&cfg.FaultAt, "fault-at", cfg.FaultAt, "the fault starts this long into the burst")
	fs.DurationVar(&cfg.FaultFor, "fault-for", cfg.FaultFor, "how long a fault lasts (a killed process stays down this long)")
	fs.IntVar(&cfg.Stock, "stock", 0, "the burst voucher's uses (0: 30% of the requests)")
	fs.DurationVar(&cfg.RecoveryBound, "recovery-bound", cfg.RecoveryBound, "new reserves must be answered within this after the fault")
	fs.DurationVar(&cfg.SettleBound, "settle-bound", cfg.SettleBound, "Redis must equal the database within this after the last request")
	fs.DurationVar(&cfg.Fast503, "fast-503", cfg.Fast503, "while a fault lasts, the p99 of the 503 answers must stay within this")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the request plans")
	fs.DurationVar(&cfg.Attack.Timeout, "timeout", cfg.Attack.Timeout, "per-request timeout of the clients (no answer within it: a failed request)")
	fs.IntVar(&cfg.Attack.MaxWorkers, "max-workers", cfg.Attack.MaxWorkers, "most requests in flight")
	out := fs.String("out", "", "report directory (default loadtest/reports/chaos-<timestamp>)")
	fs.StringVar(&cfg.BinDir, "bin", "", "directory holding ledger and proxy")
	durablePG := fs.Bool("durable-pg", false, "Postgres with fsync on")
	_ = fs.Parse(args)
	if *list {
		for _, s := range Scenarios() {
			fmt.Printf("%-17s %s\n", s.Name, s.Describe(cfg.FaultFor))
		}
		return nil
	}
	if *short {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, apply := range map[string]func(){
			"rate": func() { cfg.Rate = ShortChaos.Rate }, "duration": func() { cfg.Duration = ShortChaos.Duration },
			"fault-at": func() { cfg.FaultAt = ShortChaos.FaultAt }, "fault-for": func() { cfg.FaultFor = ShortChaos.FaultFor },
		} {
			if !set[name] {
				apply()
			}
		}
	}
	if cfg.Rate <= 0 || cfg.Duration <= 0 || cfg.FaultAt < 0 || cfg.FaultFor <= 0 || cfg.FaultAt >= cfg.Duration {
		return errors.New("need --rate > 0, --duration > 0, --fault-for > 0 and 0 <= --fault-at < --duration")
	}
	scenarios := Scenarios()
	if len(picked) > 0 {
		var chosen []Scenario
		for _, name := range picked {
			i := slices.IndexFunc(scenarios, func(s Scenario) bool { return s.Name == name })
			if i < 0 {
				return fmt.Errorf("unknown scenario %q (have %s)", name, strings.Join(ScenarioNames(), ", "))
			}
			chosen = append(chosen, scenarios[i])
		}
		scenarios = chosen
	}
	if *out == "" {
		*out = defaultOut("chaos")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	logPath := filepath.Join(*out, "services.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cfg.ServiceLog = logFile

	rep := newChaosReport(cfg, "loadtest chaos "+strings.Join(args, " "))
	fmt.Printf("chaos: %d scenarios, each under %d requests at %.0f/s with the fault %s in for %s; services log to %s\n",
		len(scenarios), cfg.requests(), cfg.Rate, cfg.FaultAt, cfg.FaultFor, logPath)
	pg, err := devstack.StartPostgres(devstack.PostgresOptions{Durable: *durablePG})
	if err != nil {
		return err
	}
	defer pg.Stop()
	for _, sc := range scenarios {
		fmt.Printf("%-17s %s ... ", sc.Name, sc.Describe(cfg.FaultFor))
		res, err := RunScenario(ctx, pg, sc, cfg)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			res = &ChaosResult{Scenario: sc.Name, Fault: sc.Describe(cfg.FaultFor), Error: err.Error(),
				RecoverySeconds: -1, SettleSeconds: -1, Statuses: map[string]int{}}
		}
		rep.Results = append(rep.Results, res)
		fmt.Printf("%s (recovered %s, Redis = DB %s)\n", verdict(res.Pass), seconds(res.RecoverySeconds), seconds(res.SettleSeconds))
		for _, c := range res.Checks {
			if !c.Pass {
				fmt.Printf("    FAIL %s: %s\n", c.Name, c.Detail)
			}
		}
		if res.Error != "" {
			fmt.Printf("    ERROR %s\n", res.Error)
		}
	}
	rep.finish()
	fmt.Println()
	PrintChaosTable(os.Stdout, rep.Results)
	md, js, err := WriteChaosReport(*out, rep)
	if err != nil {
		return err
	}
	fmt.Printf("\n%s\nreport:  %s\nsummary: %s\n", rep.Verdicts, md, js)
	if !rep.Pass {
		return fmt.Errorf("chaos: %s", rep.Verdicts)
	}
	return nil
}
