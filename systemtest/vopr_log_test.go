package systemtest

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/testkit/devstack"
)

// TestVOPRLog is the VOPR over writePath log vouchers : the same
// drivers, history and checks as TestVOPR, on a stack of two ledgers in one
// admissions consumer group over a Kafka (kfake, its log on disk) that can be
// stopped, with the reconciler on at a short interval and HANGING_GRACE
// short. Its faults hold consumption back and let it go (every fetch held,
// one ledger stopped with SIGSTOP), stop the broker for longer than
// HANGING_GRACE, kill -9 and restart a ledger, and lock rows or pause Redis
// as TestVOPR's do; its operator pauses and resumes, PATCHes totalLimit
// (below the uses held too), the window, the terms (discountAmount, holdTtl,
// minOrderAmount) and perUserLimit through either ledger, and replays dead
// letters; its drivers resend orders with other amounts. Once a round is
// quiet, beyond TestVOPR's checks: every 201 has its row with the terms the
// 201 promised (customer, discount, expires_at within the hold it
// announced), nothing was dead-lettered, and no reconcile repaired anything.
//
// make test runs its short version (voprLogFixedSeeds and one random seed);
// make vopr runs it for VOPR_DURATION when VOPR_RUN picks it.
func TestVOPRLog(t *testing.T) {
	t.Parallel()
	seeds, duration := voprPlan(t)
	if duration == 0 && *voprSeed == 0 && os.Getenv("VOPR_SEED") == "" {
		seeds = append(append([]uint64{}, voprLogFixedSeeds...), seeds[len(seeds)-1])
	}
	s := newVOPRLogStack(t)
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
			runVOPRLogRound(t, s, newVOPRLogRound(seed, rounds), stats)
		})
		if !ok {
			failed++
			if err := s.healthy(); err != nil {
				t.Fatalf("after seed %d the stack did not come back (%v): stopping, every later round would fail on it; %s", seed, err, stats)
			}
		}
	}
	t.Logf("VOPR log: %d rounds (%d failed) in %v; %s", rounds, failed, time.Since(start).Round(time.Second), stats)
}

// voprLogFixedSeeds are the short run's rounds, beside one random seed.
var voprLogFixedSeeds = []uint64{1}

// The log rounds' settings beyond TestVOPR's.
const (
	// voprLogGrace is the ledgers' HANGING_GRACE: above the proxy's
	// LEDGER_TIMEOUT (voprLedgerTimeout), as the README asks, and short
	// enough that the broker's outages (voprLogBrokerDown) outlast it.
	voprLogGrace = time.Second
	// voprLogReconcile is the ledgers' RECONCILE_INTERVAL: the reconciler
	// runs all along, tempted by every record held in the log.
	voprLogReconcile = 500 * time.Millisecond
	// voprLogSession is KAFKA_ADMISSIONS_SESSION_TIMEOUT (its least): a
	// killed ledger's partitions wait this long for another member.
	voprLogSession = 6 * time.Second
	// voprLogQuiet bounds the wait for quiescence: a ledger killed at the
	// round's end holds its partitions for voprLogSession, then the records
	// behind them are written, expiries and the settler follow.
	voprLogQuiet = 30 * time.Second
	// voprLogHold is the vouchers' holdTtl at creation; PATCHes set 1-3 s.
	voprLogHold    = 2 * time.Second
	voprLogMaxHold = 3 * time.Second
)

// voprLogStack is a voprStack whose ledger has an admissions log, a second
// ledger in the same consumer group, and the broker.
type voprLogStack struct {
	*voprStack
	ledgerB    *devstack.Service
	ledgerBURL string
	kafka      *persistedKafka
}

func newVOPRLogStack(t *testing.T) *voprLogStack {
	t.Helper()
	k := startPersistedKafka(t)
	s := newVOPRStackWith(t, []string{
		"KAFKA_ADMISSIONS_BROKERS=" + k.addr, "KAFKA_ADMISSIONS_SESSION_TIMEOUT=" + voprLogSession.String(),
		"HANGING_GRACE=" + voprLogGrace.String(), "RECONCILE_INTERVAL=" + voprLogReconcile.String(),
	})
	ls := &voprLogStack{voprStack: s, kafka: k}
	ls.ledgerB, ls.ledgerBURL = startVOPRServiceOf(t, "ledger", "ledger-b", "LEDGER_ADDR", s.logFile, s.ledgerEnv)
	return ls
}

// healthy is nil when both ledgers and the proxy answer /healthz 200.
func (ls *voprLogStack) healthy() error {
	for _, base := range []string{ls.LedgerURL, ls.ledgerBURL, ls.ProxyURL} {
		ctx, cancel := voprCallCtx("", 0)
		a := newVOPRClient().do(ctx, http.MethodGet, base+"/healthz", "", nil)
		cancel()
		if a.status != http.StatusOK {
			return fmt.Errorf("%s/healthz: %v", base, a)
		}
	}
	return nil
}

// ledger is the ledger i (0: the one the proxy calls, 1: the other) and its URL.
func (ls *voprLogStack) ledger(i int) (*devstack.Service, string) {
	if i == 0 {
		return ls.Ledger, ls.LedgerURL
	}
	return ls.ledgerB, ls.ledgerBURL
}

// newVOPRLogRound draws a log round's plan from its seed: fewer drivers
// than TestVOPR's (its faults stop the system for seconds at a time), and
// every voucher a flash voucher on writePath log.
func newVOPRLogRound(seed uint64, number int) *voprRound {
	rng := rand.New(rand.NewPCG(seed, 0x6c6f6721))
	r := &voprRound{
		seed: seed, number: number, log: true,
		drivers: 4 + rng.IntN(3), opsEach: 250 + rng.IntN(150),
		customers: 4 + rng.IntN(6), orders: 24 + rng.IntN(24),
	}
	for range 2 + rng.IntN(2) {
		limit := 3 + rng.IntN(10)
		r.vouchers = append(r.vouchers, voprVoucher{
			flash: true, limit: limit, perUser: 1 + rng.IntN(3), maxLimit: limit + 6,
		})
	}
	return r
}

// createLogVoucher creates a flash voucher on writePath log with the round's
// first terms.
func (ls *voprLogStack) createLogVoucher(t *testing.T, v voprVoucher) {
	t.Helper()
	r := call(t, "POST", ls.LedgerURL+"/admin/vouchers", ledgerToken, map[string]any{
		"code": v.code, "discountAmount": 100_000, "minOrderAmount": 1_000, "totalLimit": v.limit,
		"perUserLimit": v.perUser, "flashSale": true, "writePath": "log", "holdTtl": voprLogHold.String(),
		"startsAt": time.Now().Add(-time.Hour).Format(time.RFC3339), "endsAt": time.Now().Add(time.Hour).Format(time.RFC3339),
	})
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	knownAt(t, v.code, ls.ProxyURL)
}

// voprLogRun is a log round in progress: a voprRun with the log stack.
type voprLogRun struct {
	*voprRun
	ls *voprLogStack
}

// runVOPRLogRound creates the round's vouchers, runs its drivers, operator
// and faults together, brings every process back, waits for quiescence and
// checks.
func runVOPRLogRound(t *testing.T, s *voprLogStack, r *voprRound, stats *voprStats) {
	for i := range r.vouchers {
		v := &r.vouchers[i]
		v.code = newCode(t)
		s.createLogVoucher(t, *v)
	}
	t.Log(r)
	logFrom := fileSize(s.logPath)
	h := newVOPRHistory()
	run := &voprLogRun{voprRun: &voprRun{s: s.voprStack, r: r, h: h, stats: stats, client: newVOPRClient()}, ls: s}
	run.heldBefore = run.admittedBefore
	run.moreChecks = run.logChecks
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(2)
	go func() { defer bg.Done(); run.operateLog(stop) }()
	go func() { defer bg.Done(); run.injectLog(stop) }()
	var drivers sync.WaitGroup
	for d := range r.drivers {
		drivers.Add(1)
		go func() { defer drivers.Done(); run.drive(d) }()
	}
	drivers.Wait()
	close(stop)
	bg.Wait()
	run.heal(t)
	run.settleRound(t)
	t.Logf("round ran %d operations in %v; %d faults", h.len(), h.now().Round(time.Millisecond), run.faults.Load())

	problems := run.awaitChecks(t, "quiet", voprLogQuiet)
	if len(problems) == 0 {
		// Then once every hold left has expired and been swept.
		time.Sleep(voprLogMaxHold + 3*voprExpiryInterval)
		problems = run.awaitChecks(t, "expired", voprQuiet)
	}
	repairs := run.repairs()
	for i := range repairs {
		if len(problems) == 0 {
			// Say so: the repair freed or rewrote what no 201 depended on
			// (a hold no client was promised, terms a PATCH was writing).
			repairs[i].msg += " (every other check passed: no 201 lost its row or its hold)"
		}
	}
	problems = append(problems, repairs...)
	problems = append(problems, run.deadlocks(s.logPath, logFrom)...)
	stats.addRound(r, problems)
	if len(problems) > 0 {
		t.Errorf("VOPR log %s\n%s\nproblems by check: %s\nservice logs: %s\n%s",
			r, r.reproduce(), voprProblemCounts(problems), s.logPath, run.report(problems))
	}
}

// voprProblemCounts counts problems by check, for a failed round's summary.
func voprProblemCounts(problems []voprProblem) string {
	n := map[string]int{}
	for _, p := range problems {
		n[p.check]++
	}
	return formatCounts(n)
}
