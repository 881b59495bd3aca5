package chaos

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
)

// The links the harness can break: an embedded toxiproxy between one service
// and one server.
const (
	linkProxyRedis  = "proxy-redis"
	linkLedgerRedis = "ledger-redis"
	linkLedgerPG    = "ledger-postgres"
)

// Scenario is one fault, injected under a burst.
type Scenario struct {
	Name          string
	Fault         string // what happens, for the report; {d} is the fault's duration
	NoPersistence bool   // Redis without AOF (otherwise appendonly, everysec)
	TwoLedgers    bool   // two ledgers behind a TCP balancer; the proxy talks to the balancer
	// Fleet: two proxies and two ledgers, each pair behind a balancer that
	// follows /readyz; clients send to the proxies' balancer.
	Fleet     bool
	LedgerEnv []string // the ledgers' environment beyond chaosLedgerEnv (a later entry wins)
	// Reconciler says why the scenario keeps the ledger's periodic reconciler
	// (reconcilerEnv). Empty, the scenario runs without it (chaosLedgerEnv):
	// Redis must come to agree with the database on its own, and a
	// reconcile that repairs anything, the periodic one
	// or the reconcile of what a restarted Redis inherited, fails the
	// scenario.
	Reconciler string
	// RepairsFail: the reconciler runs (Reconciler says why) and yet any
	// repair fails the scenario: it is there to be tempted, not to clean up.
	RepairsFail bool
	ProxyEnv    []string // the proxies' beyond chaosProxyEnv
	// Direct: the services reach Redis and Postgres without toxiproxy (no
	// toxic scenario; as BENCHMARKS.md measured the rates).
	Direct bool
	// AdmissionsLog: the ledger's admissions log, for writePath log
	// vouchers, on an in-process Kafka (kfake) whose log is on disk, so that
	// the scenario can restart it (stack.Stack.RestartKafka).
	AdmissionsLog bool
	// Strict: every request gets its real answer: no 503 and no connection
	// error at all (a deploy must be invisible to clients).
	Strict bool
	// ByName: runs only when named (--scenario), not in "all".
	ByName bool
	// Tune sets the scenario's own traffic and bounds from the run's (which
	// says whether the run is short); nil: the run's as they are.
	Tune func(Config) Config
	// Run replaces the burst-and-fault run (RunScenario's) with the scenario's
	// own; Inject is then unused.
	Run func(ctx context.Context, pg *devstack.Postgres, sc Scenario, cfg Config) (*Result, error)
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
		{Name: "redis-pause", Direct: true, Fault: "Redis stopped (SIGSTOP) for {d}: every call hangs, nothing is refused or cut; then SIGCONT",
			Inject: pauseRedis},
		{Name: "redis-kill-aof",
			Reconciler: "Redis' data is lost on purpose: with appendfsync everysec the restarted Redis may lack the last second of admissions and give-backs, which only a reconcile against the database restores",
			Fault:      "kill -9 Redis (appendonly yes, appendfsync everysec), down for {d}, restarted from its AOF",
			Inject:     killRedis},
		{Name: "redis-kill-empty", NoPersistence: true,
			Reconciler: "Redis' data is lost on purpose: it restarts empty, and warmup and reconciles load it back from the database",
			Fault:      "kill -9 Redis without persistence, down for {d}, restarted empty",
			Inject:     killRedis},
		{Name: "pg-restart", Fault: "Postgres restarted: fast shutdown (open transactions roll back, connections cut) and start",
			Inject: restartPostgres},
		{Name: "pg-reset", Fault: "ledger->Postgres connections cut as replies come back, mid-transaction and mid-COMMIT (reset_peer toxic) for {d}",
			Inject: toxic([]string{linkLedgerPG}, "reset_peer", "downstream", map[string]any{"timeout": 0})},
		// The writes in flight when the ledger dies are answered EOF: the
		// proxy hands the orders to the restarted ledger (its unsettled
		// route), which settles them after HANGING_GRACE. That passed in two
		// runs and left one use held in a third (issue 22's closing note),
		// so the scenario keeps the reconciler until that is understood.
		{Name: "ledger-kill", Fault: "kill -9 the ledger with writes in flight, down for {d}, restarted",
			Reconciler: "writes in flight die with the ledger: the proxy hands them over, but one run still left a use held with no row (open, issue 22)",
			Inject:     kill(func(r *rig) *devstack.Service { return r.st.Ledger })},
		{Name: "ledger-pair-kill", TwoLedgers: true, Fault: "two ledgers behind a TCP balancer the proxy talks to; kill -9 one, down for {d}, restarted",
			Inject: kill(func(r *rig) *devstack.Service { return r.ledgerB })},
		// Claims admitted in Redis whose write was still in the killed
		// proxy (its forward queue, or not yet delivered) have no row, and
		// no living party knows them: their clients got no answer, and only
		// a retry of the order or the reconciler after HANGING_GRACE frees
		// their uses.
		{Name: "proxy-kill", Fault: "kill -9 the proxy with requests in flight, down for {d}, restarted",
			Reconciler: "admitted claims whose write died with the proxy hold their uses with no row, known to no one alive: only a retry of the order, which the burst's clients never send, or the reconciler after HANGING_GRACE frees them",
			Inject:     kill(func(r *rig) *devstack.Service { return r.st.Proxy })},
		{Name: "rolling-restart", Fleet: true, Direct: true, Strict: true, Tune: tuneRollingRestart,
			// No reconciler, as in every scenario that keeps Redis' data:
			// Redis must equal the database because every stop was clean,
			// not because a reconcile fixed it. MAX_INFLIGHT and the
			// admission window out of the way: on a
			// 2-core machine shared with other work, 2,000/s on one proxy
			// while the other restarts has moments of 256 requests in flight
			// and of writes slower than ADMIT_WRITE_TARGET, and what is
			// measured here is the deploy, not the shedding (overload
			// measures that). DB_TIMEOUT at 1 s for the same reason: on
			// this 2-core machine a single-order group commit passed the
			// 500 ms default twice in three runs (2026-12-04), each time
			// while a restarted process started beside it, and answered
			// 503; that deadline is the hung-Postgres guard, which
			// ledger/internal/web/hung_test.go measures. LEDGER_TIMEOUT (1.5 s) stays
			// above it and HANGING_GRACE (2 s) above both.
			LedgerEnv: []string{"MAX_INFLIGHT=4096", "DB_TIMEOUT=1s"},
			ProxyEnv:  []string{"MAX_INFLIGHT=4096", "ADMIT_WRITE_TARGET=0"},
			Fault:     "two proxies and two ledgers behind balancers that follow /readyz; each in turn gets SIGTERM and is started again once it has exited (ledger a, ledger b, proxy a, proxy b)",
			Inject:    rollingRestart},
		{Name: "overload", Run: runOverload, Direct: true,
			Fault: "3x the flash path's maximum sustainable rate (measured first on the same stack, or --flash-max) for 20 s (--short: 5 s) on one flash voucher with a use for every order, the stack and the generator on CPUs of their own"},
		// The reconciler runs every second through both faults:
		// a broker down longer than HANGING_GRACE must not make it free a
		// use whose record is in the log, so a repair fails the sale.
		{Name: "log-sale", Run: runLogSale, ByName: true, Direct: true, AdmissionsLog: true, Tune: tuneLogSale,
			Reconciler:  "on every second through the faults, to be tempted: a record in the log (a 201) must keep its use however long the broker or a consumer is away",
			RepairsFail: true,
			Fault:       "a writePath log voucher of --stock uses (default 50,000; --short: 1,000; perUserLimit 2) sold to a customer per use, 3 orders each, by 64 clients as fast as it answers, to --ledgers ledgers in the admissions group (default 1; 2: behind a TCP balancer); the ledger (the first) killed (-9) at 30% of the uses answered 201, down for {d}; the broker (kfake, its log on disk) stopped at 65%, down for --broker-down (default {d}), started again from its files; the reconciler on every second throughout"},
		{Name: "soak", Run: runSoak, ByName: true, Fleet: true, Direct: true,
			LedgerEnv: []string{"RECONCILE_INTERVAL=" + soakReconcile.String()}, Tune: tuneSoak,
			Reconciler: "its rounds include redis-kill-aof, which loses Redis' data on purpose, and its last check waits for a reconcile; the repairs of one round would fail every later one",
			Fault:      "the fleet for 10 min (--short: 60 s) at half the flash path's maximum rate (--short: at most 1,000/s), a round every 30 s (10 s) with one fault drawn from redis-kill-aof, redis-pause, pg-restart, ledger-kill, proxy-kill and rolling-restart, and payers confirming, refunding and releasing beside"},
	}
}

// tuneSoak gives each round 20 s to settle: a use held for a request the
// fault left unanswered comes back HANGING_GRACE after it, at the next
// reconcile (soakReconcile).
func tuneSoak(c Config) Config {
	c.SettleBound = 20 * time.Second
	// The harness holds three descriptors per client connection (the
	// client's and both ends of its balancer) under a limit of 20,000 here:
	// two rounds of up to 4,096 connections each through a Redis stall ran
	// out of them (a soak on 2026-11-30 failed to restart Postgres with "open
	// /dev/null: too many open files"). 2,048 is more than 1,500/s needs with
	// a second of latency.
	c.Attack.MaxWorkers, c.Attack.Connections = 2048, 2048
	return c
}

// tuneRollingRestart is rolling-restart's plan: a burst long enough for four
// restarts (2,000/s for 30 s; short: 1,000/s for 16 s), and Redis = DB within
// 2 s of the last request with the reconciler off.
func tuneRollingRestart(c Config) Config {
	c.Rate, c.Duration, c.FaultAt = 2000, 30*time.Second, 3*time.Second
	if c.Short {
		c.Rate, c.Duration, c.FaultAt = 1000, 16*time.Second, time.Second
	}
	c.SettleBound = 2 * time.Second
	return c
}

// ScenarioNames lists the scenarios' names.
func ScenarioNames() []string { return load.Names(Scenarios()) }

// ScenarioName and OnlyByName make a Scenario a load.Named.
func (s Scenario) ScenarioName() string { return s.Name }
func (s Scenario) OnlyByName() bool     { return s.ByName }

// pickScenarios returns the scenarios named, in the order given; none named
// (or "all"): all of them but those that run only by name.
func pickScenarios(names []string) ([]Scenario, error) { return load.Pick(Scenarios(), names) }

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

func pauseRedis(_ context.Context, r *rig, _ time.Duration) (func() error, error) {
	if err := r.redis.Pause(); err != nil {
		return nil, err
	}
	return r.redis.Resume, nil
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
