package systemtest

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/testkit/agreementtest"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

// The VOPR (issue 22, after TigerBeetle's Viewstamped Operation Replicator):
// rounds of seeded random operations on the whole state machine (reserve,
// confirm, release, refund, expiry, PATCH, pause, resume, warmup) from many
// goroutines, with faults injected from outside the services (rows held
// locked from another Postgres session, Redis paused, Redis keys deleted,
// clients that hang up or give up early), each round checked once it is quiet
// against the database's invariants, the answers the drivers got and the
// agreement of Redis with Postgres. vopr_ops_test.go holds the drivers and
// the operator, vopr_faults_test.go the faults, vopr_check_test.go the checks
// and the failure report, vopr_agree_test.go the Redis-Postgres comparison.
//
// A seed decides a round: its vouchers, and every choice of the drivers (a
// fixed number of operations each), the operator and the faults. How many
// operations the operator and the faults get in, and what the races make of
// them, depend on timing, so a seed replays its choices, not always its
// failure.
var (
	voprSeed     = flag.Uint64("vopr.seed", 0, "run the VOPR round of this seed only (or, with -vopr.duration, start at it); also VOPR_SEED")
	voprDuration = flag.Duration("vopr.duration", 0, "run VOPR rounds of consecutive seeds for this long (the short fixed set when 0); also VOPR_DURATION")
)

// voprFixedSeeds are the short run's rounds, beside one random seed; 3 is a
// round that destroys Redis data (see voprDestroys).
var voprFixedSeeds = []uint64{1, 2, 3}

// The services' settings in these rounds: deadlines short enough to fire under
// the injected delays, reservations that expire within a round.
const (
	voprReservationTTL = 1500 * time.Millisecond
	voprExpiryInterval = 100 * time.Millisecond
	voprDBTimeout      = 150 * time.Millisecond
	voprLedgerTimeout  = 400 * time.Millisecond
	// voprHangingGrace is the ledger's HANGING_GRACE, well within voprQuiet.
	voprHangingGrace = 2 * time.Second
	// voprDeadlockTimeout is the ledger's sessions' deadlock_timeout.
	voprDeadlockTimeout = 50 * time.Millisecond
	// voprQuiet bounds the wait for quiescence after a round: the checks are
	// polled until they all pass at once or this has passed. The settler
	// resolves parked writes once a second and a group commit ends within
	// DB_TIMEOUT of its statements; expiry settles within TTL + interval.
	voprQuiet = 12 * time.Second
)

// TestVOPR runs the rounds and reports what they ran. It runs beside the
// package's other parallel tests: it judges invariants, not latency, and
// its rounds inject the delays they mean to survive (a busier machine only
// fires their deadlines more often).
func TestVOPR(t *testing.T) {
	t.Parallel()
	seeds, duration := voprPlan(t)
	s := newVOPRStack(t)
	stats := newVOPRStats()
	start := time.Now()
	rounds, failed := 0, 0
	for i := 0; ; i++ {
		var seed uint64
		if duration > 0 {
			if time.Since(start) >= duration {
				break
			}
			seed = seeds[0] + uint64(i)
		} else {
			if i == len(seeds) {
				break
			}
			seed = seeds[i]
		}
		rounds++
		ok := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			runVOPRRound(t, s, newVOPRRound(seed, rounds), stats)
		})
		if !ok {
			failed++
		}
	}
	t.Logf("VOPR: %d rounds (%d failed) in %v; %s", rounds, failed, time.Since(start).Round(time.Second), stats)
}

// voprPlan returns the seeds to run and how long (0: exactly these seeds).
func voprPlan(t *testing.T) ([]uint64, time.Duration) {
	seed, duration := *voprSeed, *voprDuration
	if env := os.Getenv("VOPR_SEED"); env != "" && seed == 0 {
		n, err := strconv.ParseUint(env, 10, 64)
		require.NoError(t, err, "VOPR_SEED=%q", env)
		seed = n
	}
	if env := os.Getenv("VOPR_DURATION"); env != "" && duration == 0 {
		d, err := time.ParseDuration(env)
		require.NoError(t, err, "VOPR_DURATION=%q", env)
		duration = d
	}
	switch {
	case duration > 0 && seed == 0:
		return []uint64{rand.Uint64N(1 << 32)}, duration
	case duration > 0:
		return []uint64{seed}, duration
	case seed != 0:
		return []uint64{seed}, 0
	}
	return append(append([]uint64{}, voprFixedSeeds...), rand.Uint64N(1<<32)), 0
}

// voprStack is the system under test: the stack's ledger and proxy with the
// VOPR's settings, on a Redis of its own (CLIENT PAUSE stops a whole server),
// and the clients the faults and checks use.
type voprStack struct {
	*stack
	rdb       redis.UniversalClient
	logPath   string    // the ledger's and the proxy's logs
	logFile   io.Writer // that file, for another ledger
	ledgerEnv []string  // the ledger's environment, for another ledger
}

func newVOPRStack(t *testing.T) *voprStack { return newVOPRStackWith(t, nil) }

// newVOPRStackWith is newVOPRStack with ledgerEnv added to the ledger's
// environment (a later entry wins).
func newVOPRStackWith(t *testing.T, ledgerEnv []string) *voprStack {
	t.Helper()
	rs := devstacktest.NewRedis(t, devstack.RedisOptions{})
	// A database of its own: the log VOPR runs beside it, and each stack's
	// ledgers sweep and reconcile every voucher of their database against
	// their own Redis.
	dbURL := devstacktest.NewDatabase(t)
	// The services log every fault they answer; under injected faults that is
	// thousands of lines a round, kept in a file for the diagnosis.
	logPath := filepath.Join(os.TempDir(), fmt.Sprintf("flashgate-vopr-services-%d.log", time.Now().UnixNano()))
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	t.Cleanup(func() { logFile.Close() })
	t.Logf("ledger and proxy logs: %s", logPath)
	// Its own checks run after every round (vopr_check_test.go); the stack's
	// end-of-test checks are not registered.
	s := &stack{opts: stackOptions{redisURL: rs.URL(), dbURL: dbURL, coalesce: true, soldOutTTL: linSoldOutTTL},
		checks: &agreementtest.Checks{}}
	env := append([]string{
		"DATABASE_URL=" + voprLedgerDB(t, dbURL), "REDIS_URL=" + rs.URL(), "LEDGER_TOKEN=" + ledgerToken,
		"RESERVATION_TTL=" + voprReservationTTL.String(), "EXPIRY_INTERVAL=" + voprExpiryInterval.String(),
		"RECONCILE_INTERVAL=1h", "DB_TIMEOUT=" + voprDBTimeout.String(),
		// An admission whose fate the proxy could not learn (its ledger
		// call timed out, as calls do on a loaded machine) is settled by
		// the ledger once HANGING_GRACE has passed: with the default 30 s
		// it outlived voprQuiet and a round failed on an order that was
		// about to be settled (seed 2 beside other packages' tests).
		"HANGING_GRACE=" + voprHangingGrace.String(),
	}, ledgerEnv...)
	s.Ledger, s.LedgerURL = startVOPRService(t, "ledger", "LEDGER_ADDR", logFile, env)
	s.Proxy, s.ProxyURL = startVOPRService(t, "proxy", "PROXY_ADDR", logFile, []string{
		"REDIS_URL=" + rs.URL(), "LEDGER_URL=" + s.LedgerURL, "LEDGER_TOKEN=" + ledgerToken,
		devstack.OpenEdge, "SOLDOUT_TTL=" + linSoldOutTTL.String(), "VOUCHER_CACHE_TTL=5s",
		"REDIS_TIMEOUT=" + redisTimeout.String(), "LEDGER_TIMEOUT=" + voprLedgerTimeout.String(),
		"PROXY_COALESCE=on", "PROXY_MAX_BATCH=256",
		// The histories' clients retry an unknown answer within 20-200 ms,
		// well before Retry-After: refused early, every retry would be one
		// more unknown operation, and the history's bound on them stalls it.
		"REFUSE_EARLY_RETRIES=off",
	})
	rdb, err := gate.NewClient(rs.URL(), gate.ClientOptions{Timeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { rdb.Close() })
	s.gate = gate.New(rdb)
	cfg, err := pgxpool.ParseConfig(dbURL)
	require.NoError(t, err)
	cfg.MaxConns = 16 // the faults' lock holders and the checks
	s.pool, err = pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(s.pool.Close)
	return &voprStack{stack: s, rdb: rdb, logPath: logPath, logFile: logFile, ledgerEnv: env}
}

// voprLedgerDB is the ledger's DATABASE_URL: on the tests' own Postgres (a
// superuser's), its sessions detect a deadlock after voprDeadlockTimeout, below
// DB_TIMEOUT, so that a deadlock is logged as one (40P01, see deadlocks)
// instead of ending as a statement timeout. A DATABASE_URL from the
// environment is used as it is (its user may not set deadlock_timeout).
func voprLedgerDB(t *testing.T, dbURL string) string {
	if os.Getenv("DATABASE_URL") != "" {
		t.Logf("DATABASE_URL is set: deadlocks show as DB_TIMEOUT timeouts only")
		return dbURL
	}
	sep := "?"
	if strings.Contains(dbURL, "?") {
		sep = "&"
	}
	return dbURL + sep + "deadlock_timeout=" + strconv.Itoa(int(voprDeadlockTimeout.Milliseconds()))
}

// startVOPRService is startService with the service's log sent to out.
func startVOPRService(t *testing.T, name, addrVar string, out io.Writer, env []string) (*devstack.Service, string) {
	t.Helper()
	return startVOPRServiceOf(t, name, name, addrVar, out, env)
}

// startVOPRServiceOf is startVOPRService of bin/binary under another name.
func startVOPRServiceOf(t *testing.T, binary, name, addrVar string, out io.Writer, env []string) (*devstack.Service, string) {
	t.Helper()
	port, err := devstack.FreePort()
	require.NoError(t, err)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	// Into a copy: two ledgers started from one environment each keep their
	// own address (a restart of the first would otherwise bind the second's).
	env = append(slices.Clip(env), addrVar+"="+addr, "SHUTDOWN_DELAY=0s")
	svc, err := devstack.StartService(name, serviceBinary(t, binary), env, "http://"+addr+"/healthz", out)
	require.NoError(t, err)
	t.Cleanup(func() { svc.Stop() })
	return svc, "http://" + addr
}

// voprRound is one round's plan, all of it drawn from its seed.
type voprRound struct {
	seed      uint64
	number    int
	destroys  bool // faults may delete a flash voucher's Redis keys (then warm it up)
	drivers   int
	opsEach   int // operations per driver
	customers int
	orders    int // orderIds in the round, shared by its vouchers
	vouchers  []voprVoucher
	log       bool // a TestVOPRLog round: writePath log vouchers (vopr_log_test.go)
}

// voprVoucher is a voucher of a round as created.
type voprVoucher struct {
	code           string
	flash          bool
	limit, perUser int
	maxLimit       int // the highest totalLimit a PATCH may set
}

// voprDestroys says whether a seed's round deletes Redis data on purpose: a
// third of the seeds, so that a run of consecutive seeds mixes both kinds.
func voprDestroys(seed uint64) bool { return seed%3 == 0 }

func newVOPRRound(seed uint64, number int) *voprRound {
	rng := rand.New(rand.NewPCG(seed, 0x766f7072))
	r := &voprRound{
		seed: seed, number: number, destroys: voprDestroys(seed),
		drivers: 6 + rng.IntN(5), opsEach: 250 + rng.IntN(200),
		customers: 4 + rng.IntN(8), orders: 30 + rng.IntN(40),
	}
	flash := 2 + rng.IntN(2)
	for i := range flash + 1 {
		limit := 3 + rng.IntN(12)
		r.vouchers = append(r.vouchers, voprVoucher{
			flash: i < flash, limit: limit, perUser: 1 + rng.IntN(3), maxLimit: limit + 6,
		})
	}
	return r
}

func (r *voprRound) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d (round %d): %d drivers x %d ops, %d customers, %d orders, destroys redis data %v; vouchers",
		r.seed, r.number, r.drivers, r.opsEach, r.customers, r.orders, r.destroys)
	for _, v := range r.vouchers {
		kind := "standard"
		switch {
		case v.flash && r.log:
			kind = "flash, writePath log"
		case v.flash:
			kind = "flash"
		}
		fmt.Fprintf(&b, " %s(%s, limit %d, per user %d)", v.code, kind, v.limit, v.perUser)
	}
	return b.String()
}

// reproduce is the line that reruns a round.
func (r *voprRound) reproduce() string {
	if r.log {
		return fmt.Sprintf("reproduce: go test ./systemtest/ -run 'TestVOPRLog$' -v -vopr.seed=%d (or VOPR_SEED=%d)", r.seed, r.seed)
	}
	return fmt.Sprintf("reproduce: go test ./systemtest/ -run 'TestVOPR$' -v -vopr.seed=%d (or VOPR_SEED=%d)", r.seed, r.seed)
}

// runVOPRRound creates the round's vouchers, runs its drivers, operator and
// faults together, waits for quiescence and checks.
func runVOPRRound(t *testing.T, s *voprStack, r *voprRound, stats *voprStats) {
	for i := range r.vouchers {
		v := &r.vouchers[i]
		v.code = newCode(t)
		s.createVoucher(t, v.code, v.limit, v.perUser, v.flash)
	}
	t.Log(r)
	fixesBefore := reconcileFixes(t, s)
	logFrom := fileSize(s.logPath)
	h := newVOPRHistory()
	run := &voprRun{s: s, r: r, h: h, stats: stats, client: newVOPRClient()}
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(2)
	go func() { defer bg.Done(); run.operate(stop) }()
	go func() { defer bg.Done(); run.inject(stop) }()
	var drivers sync.WaitGroup
	for d := range r.drivers {
		drivers.Add(1)
		go func() { defer drivers.Done(); run.drive(d) }()
	}
	drivers.Wait()
	close(stop)
	bg.Wait()
	run.settleRound(t)
	t.Logf("round ran %d operations in %v; %d faults", h.len(), h.now().Round(time.Millisecond), run.faults.Load())

	problems := run.awaitChecks(t, "quiet", voprQuiet)
	if len(problems) == 0 {
		// Then once every hold left has expired and been swept.
		time.Sleep(voprReservationTTL + 3*voprExpiryInterval)
		problems = run.awaitChecks(t, "expired", voprQuiet)
	}
	if fixes := reconcileFixes(t, s) - fixesBefore; fixes != 0 && !run.destroyed.Load() {
		problems = append(problems, voprProblem{check: "reconcile",
			msg: fmt.Sprintf("flashgate_reconcile_fixes_total rose by %v in a round that destroyed no Redis data: the reconciler repaired a divergence", fixes)})
	}
	problems = append(problems, run.deadlocks(s.logPath, logFrom)...)
	stats.addRound(r, problems)
	if len(problems) > 0 {
		t.Errorf("VOPR %s\n%s\nservice logs: %s\n%s", r, r.reproduce(), s.logPath, run.report(problems))
	}
}

// voprStats counts what the rounds ran, over the whole test.
type voprStats struct {
	mu      sync.Mutex
	seeds   []uint64
	failed  []uint64
	ops     map[string]int
	answers map[string]int
	faults  map[string]int
}

func newVOPRStats() *voprStats {
	return &voprStats{ops: map[string]int{}, answers: map[string]int{}, faults: map[string]int{}}
}

func (st *voprStats) op(kind string, status int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ops[kind]++
	st.answers[strconv.Itoa(status)]++
}

func (st *voprStats) fault(kind string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.faults[kind]++
}

func (st *voprStats) addRound(r *voprRound, problems []voprProblem) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.seeds = append(st.seeds, r.seed)
	if len(problems) > 0 {
		st.failed = append(st.failed, r.seed)
	}
}

func (st *voprStats) String() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return fmt.Sprintf("seeds %v (failed %v); operations %s; answers (0: none) %s; faults %s",
		st.seeds, st.failed, formatCounts(st.ops), formatCounts(st.answers), formatCounts(st.faults))
}

func formatCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	total := 0
	for k, n := range m {
		keys = append(keys, k)
		total += n
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return fmt.Sprintf("%d {%s}", total, strings.Join(parts, ", "))
}
