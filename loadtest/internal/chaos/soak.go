package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/loadtest/internal/verify"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
)

// soakFaults are the faults a soak draws from, by scenario name. Its Redis
// stall is redis-pause (SIGSTOP), not redis-stall's toxic: the soak's services
// reach Redis and Postgres directly (Scenario.Direct), because the harness's
// embedded toxiproxy stopped relaying on every link after a few minutes of
// four services and a Redis kill (a soak on 2026-11-30, see RELIABILITY.md).
var soakFaults = []string{"redis-kill-aof", "redis-pause", "pg-restart", "ledger-kill", "proxy-kill", "rolling-restart"}

const (
	soakPayRate     = 40               // new payer orders per second beside the reserves
	soakCreateBound = 10 * time.Second // a round's vouchers are created within this, or the round fails
	// soakReconcile is the soak's RECONCILE_INTERVAL. A reconcile goes over
	// every order each flash voucher holds in Redis, until a day after its
	// end; chaosLedgerEnv's 1s, with two ledgers and rounds of ~40,000 held
	// orders, kept Redis busy with reconciles alone (evalsha 41 ms a call on
	// average) until nothing else got through.
	soakReconcile = 5 * time.Second
)

// soakPlan is a soak's shape: rounds of Round at Rate, one fault each, for
// Total.
type soakPlan struct {
	Rate                               float64
	Total, Round, FaultAt, SampleEvery time.Duration
	// The RSS and goroutines of Last (seconds from the start) may exceed
	// Warm's by MaxGrowth at most.
	Warm, Last [2]float64
	MaxGrowth  float64
}

// soakShortRate caps the short soak's rate: `make test` runs it beside the
// other packages' tests on a 2-core machine, and at half the flash maximum the
// harness's own toxiproxy (every Redis and Postgres byte of four services)
// starves there before the services do.
const soakShortRate = 1000

// soakPlanOf is 10 minutes of 30 s rounds at half the flash path's maximum
// (--flash-max, or measured on the fleet first: runSoak),
// the fault 5 s in, sampled every 10 s, RSS and goroutines within 20% between
// minute 2 and minute 10. Short: 60 s of 10 s rounds at most soakShortRate,
// the fault 2 s in, sampled every 3 s; a minute is too short for a heap to
// reach its size and every window holds a fault, so it bounds the growth
// between 12-24 s and 42-60 s at 100%: a leak of a goroutine or a kilobyte
// per request would still pass it many times over.
func soakPlanOf(c Config) soakPlan {
	if c.Short {
		return soakPlan{Rate: min(c.FlashMax/2, soakShortRate), Total: time.Minute, Round: 10 * time.Second,
			FaultAt: 2 * time.Second, SampleEvery: 3 * time.Second, Warm: [2]float64{12, 24}, Last: [2]float64{42, 60}, MaxGrowth: 1}
	}
	return soakPlan{Rate: c.FlashMax / 2, Total: 10 * time.Minute, Round: 30 * time.Second,
		FaultAt: 5 * time.Second, SampleEvery: 10 * time.Second, Warm: [2]float64{120, 180}, Last: [2]float64{540, 600}, MaxGrowth: 0.2}
}

// soakOrder draws the rounds' faults: every fault once, in a random order
// (seeded), then again in another order, and so on.
func soakOrder(n int, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, 13))
	var out []string
	for len(out) < n {
		cycle := slices.Clone(soakFaults)
		rng.Shuffle(len(cycle), func(i, j int) { cycle[i], cycle[j] = cycle[j], cycle[i] })
		out = append(out, cycle...)
	}
	return out[:n]
}

// soakRound is one round under way: its traffic, its payers and, once judged,
// its result.
type soakRound struct {
	i     int
	sc    Scenario
	cfg   Config
	t     *traffic
	pay   *payers
	res   *Result
	codes []string
}

// runSoak runs the fleet at half the flash path's maximum rate for the plan's
// Total: round after round, each on vouchers of its own, each with one fault
// and the payers beside; each round is judged (every invariant) once its
// traffic is over, while the next runs. At the end: Redis = DB on every voucher
// after a reconcile, and the RSS and goroutines flat after warm-up.
func runSoak(ctx context.Context, pg *devstack.Postgres, sc Scenario, cfg Config) (*Result, error) {
	plan := soakPlanOf(cfg)
	byName := map[string]Scenario{}
	for _, s := range Scenarios() {
		byName[s.Name] = s
	}
	r, err := startRig(ctx, pg, sc, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: start the system: %w", sc.Name, err)
	}
	defer r.Close(ctx)
	var maxSteps []string
	if cfg.MeasureMax && !cfg.Short {
		// Half of what this fleet sustains here, measured as overload
		// measures it (no CPU split: the soak is about surviving, and the
		// fleet is four services).
		var best float64
		if best, maxSteps, err = measureFlashMax(ctx, r, cfg); err != nil {
			return nil, fmt.Errorf("%s: measure the flash path's maximum: %w", sc.Name, err)
		}
		plan.Rate = best / 2
	}
	smp := startSampler(ctx, r.fleet, plan.SampleEvery)
	start := time.Now()
	var judging sync.WaitGroup
	var rounds []*soakRound
	prevFault := make(chan struct{})
	close(prevFault)
	n := int(plan.Total / plan.Round)
	for i, name := range soakOrder(n, cfg.Seed) {
		load.Sleep(ctx, time.Until(start.Add(time.Duration(i)*plan.Round)))
		select { // one fault at a time: a rolling restart may outlast its round
		case <-prevFault:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		rd, err := startRound(ctx, r, i, byName[name], plan, cfg)
		if err != nil { // the round could not start: it fails, the soak goes on
			rd.res = &Result{Scenario: name, Error: err.Error(), RecoverySeconds: -1, SettleSeconds: -1, Statuses: map[string]int{}}
			rounds = append(rounds, rd)
			continue
		}
		rounds, prevFault = append(rounds, rd), rd.t.faultOver
		judging.Add(1)
		go func() {
			defer judging.Done()
			rd.run(ctx, r)
		}()
	}
	judging.Wait()
	elapsed := time.Since(start)
	samples := smp.finish()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res := soakResult(ctx, r, sc, cfg, plan, rounds, samples, elapsed)
	if maxSteps != nil {
		res.Checks = append([]verify.Check{{Name: checkMeasured, Pass: true,
			Detail: fmt.Sprintf("%.0f/s, so %.0f/s for the soak. Steps: %s", 2*plan.Rate, plan.Rate, strings.Join(maxSteps, "; "))}},
			res.Checks...)
	}
	return res, nil
}

// startRound creates the round's vouchers; run drives and judges it.
func startRound(ctx context.Context, r *rig, i int, fault Scenario, plan soakPlan, cfg Config) (*soakRound, error) {
	c := cfg
	c.Rate, c.Duration, c.FaultAt, c.Seed = plan.Rate, plan.Round, plan.FaultAt, cfg.Seed+uint64(i)
	rd := &soakRound{i: i, sc: fault, cfg: c}
	// The ledgers may be recovering from the last fault, or shedding: an
	// operator would try again, and so does the harness, for a while.
	var err error
	for end := time.Now().Add(soakCreateBound); ; {
		if rd.t, err = newTraffic(ctx, r.bench, fmt.Sprintf("soak%d", i), c); err == nil || time.Now().After(end) || ctx.Err() != nil {
			break
		}
		load.Sleep(ctx, time.Second)
	}
	if err != nil {
		return rd, fmt.Errorf("soak round %d: %w", i+1, err)
	}
	payCode := verify.NewCode("pay")
	for end := time.Now().Add(soakCreateBound); ; {
		err = r.bench.CreateVoucher(ctx, verify.VoucherSpec{Code: payCode, Stock: probeStock, PerUser: 1, Flash: true})
		if err == nil || time.Now().After(end) || ctx.Err() != nil {
			break
		}
		load.Sleep(ctx, time.Second)
	}
	if err != nil {
		return rd, fmt.Errorf("soak round %d: %w", i+1, err)
	}
	rd.pay, rd.codes = newPayers(r.entry, payCode, 1), []string{rd.t.spec.Code, rd.t.probeSpec.Code, payCode}
	return rd, nil
}

// run drives the round's traffic and fault, then judges it.
func (rd *soakRound) run(ctx context.Context, r *rig) {
	rd.pay.start(ctx, soakPayRate, rd.cfg.Duration)
	err := rd.t.drive(ctx, r, rd.sc, rd.cfg)
	rd.pay.wait()
	if err != nil {
		rd.res = &Result{Scenario: rd.sc.Name, Error: err.Error(), RecoverySeconds: -1, SettleSeconds: -1, Statuses: map[string]int{}}
		return
	}
	quiet := time.Now()
	settled, detail := waitSettled(ctx, r.bench, rd.cfg.SettleBound, rd.codes...)
	res := rd.t.result(rd.sc, rd.cfg, settled, detail)
	res.FaultAt += float64(rd.i) * rd.cfg.Duration.Seconds()
	// The next round's fault may have Redis or Postgres down for a moment:
	// judging is read-only, so try again.
	for attempt := 0; ; attempt++ {
		err = rd.t.judge(ctx, r.bench, res, rd.cfg, quiet.Sub(rd.t.faultEnd))
		var pay []verify.Check
		if err == nil {
			pay, err = rd.pay.checks(ctx, r.bench)
		}
		if err == nil || attempt == 10 || ctx.Err() != nil {
			res.Checks = append(res.Checks, pay...)
			break
		}
		load.Sleep(ctx, time.Second)
	}
	if err != nil {
		res.Error = err.Error()
	} else {
		res.Checks = append(res.Checks, r.agreementChecks(ctx, quiet.Add(rd.cfg.SettleBound), rd.codes...)...)
	}
	res.Pass = err == nil && verify.Passed(res.Checks)
	rd.res = res
	if rd.cfg.Progress != nil {
		fmt.Fprintf(rd.cfg.Progress, "\n    round %d %-15s %d requests: 201 %d, 409 %d, 503 %d, errors %d; recovered %s, Redis = DB %s: %s",
			rd.i+1, rd.sc.Name, res.Requests, res.Created, res.Refused, res.Unavailable, res.Errors,
			seconds(res.RecoverySeconds), seconds(res.SettleSeconds), verify.Verdict(res.Pass))
	}
	rd.t = nil // let the round's shots go
}

// soakResult adds the rounds up and makes the checks of the whole soak.
func soakResult(ctx context.Context, r *rig, sc Scenario, cfg Config, plan soakPlan, rounds []*soakRound, samples []ProcSample, elapsed time.Duration) *Result {
	res := &Result{Scenario: sc.Name, Fault: sc.Describe(plan.Round), Rate: plan.Rate, Statuses: map[string]int{},
		FaultSeconds: elapsed.Seconds(), RecoveryBound: cfg.RecoveryBound.Seconds(), SettleBound: cfg.SettleBound.Seconds(),
		Samples: samples}
	var codes, failed []string
	for _, rd := range rounds {
		rr := rd.res
		res.Rounds = append(res.Rounds, rr)
		codes = append(codes, rd.codes...)
		res.Requests += rr.Requests
		res.Created += rr.Created
		res.Refused += rr.Refused
		res.Unavailable += rr.Unavailable
		res.Errors += rr.Errors
		res.Replays += rr.Replays
		res.Probes += rr.Probes
		res.RetryingSends += rr.RetryingSends
		for k, v := range rr.Statuses {
			res.Statuses[k] += v
		}
		res.RecoverySeconds = max(res.RecoverySeconds, rr.RecoverySeconds)
		if !rr.Pass {
			failed = append(failed, fmt.Sprintf("round %d (%s): %s", rd.i+1, rr.Scenario, failedNames(rr)))
		}
		res.Achieved += rr.Achieved / float64(len(rounds))
	}
	res.Checks = append(res.Checks, verify.NewCheck("every round: every invariant and recovery", len(failed) == 0,
		"%d rounds, one fault each (%s); %d failed%s", len(rounds), faultList(rounds), len(failed), verify.Sample(failed)))
	// Wait for a reconcile (soakReconcile), then Redis must hold exactly what
	// the database holds, voucher by voucher.
	load.Sleep(ctx, soakReconcile+time.Second)
	settled, detail := waitSettled(ctx, r.bench, cfg.SettleBound, codes...)
	res.SettleSeconds, res.SettleDetail = -1, detail
	if settled >= 0 {
		res.SettleSeconds = settled.Seconds()
	}
	res.Checks = append(res.Checks, verify.NewCheck("Redis = DB on every voucher after the last reconcile", settled >= 0,
		"%d vouchers (burst, probe and payers' of each round): %s%s", len(codes), seconds(res.SettleSeconds), suffix(detail)))
	res.Checks = append(res.Checks, flatChecks(samples, plan.Warm, plan.Last, plan.MaxGrowth)...)
	res.Pass = verify.Passed(res.Checks)
	return res
}

func failedNames(r *Result) string {
	if r.Error != "" {
		return r.Error
	}
	var names []string
	for _, c := range r.Checks {
		if !c.Pass {
			names = append(names, c.Name+": "+c.Detail)
		}
	}
	return fmt.Sprint(names)
}

func faultList(rounds []*soakRound) string {
	count := map[string]int{}
	for _, rd := range rounds {
		count[rd.sc.Name]++
	}
	return verify.StatusList(count)
}
