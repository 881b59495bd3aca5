package chaos

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/burst"
	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/loadtest/internal/verify"
)

// traffic is what a scenario sends: a burst on its voucher, beside it the
// clients that retry their 503s, and from the fault on the probes on a voucher
// of their own; and, once driven, what they were answered and when the fault
// lasted.
type traffic struct {
	spec, probeSpec verify.VoucherSpec
	customers       int
	plan            load.Plan // the burst's
	volley          load.Volley
	rc              *load.RetryingClients
	pr              *prober
	probes          []load.Shot
	live            []time.Duration // the proxy's /healthz while the fault lasted (liveness)
	start           time.Time       // of the burst
	faultStart      time.Time
	faultEnd        time.Time
	faultOver       chan struct{} // closed once the fault has ended
}

// newTraffic creates the scenario's two vouchers and plans its burst.
func newTraffic(ctx context.Context, b *verify.Bench, name string, cfg Config) (*traffic, error) {
	n := cfg.requests()
	stock := cfg.Stock
	if stock <= 0 {
		stock = max(n*3/10, 1)
	}
	t := &traffic{
		spec:      verify.VoucherSpec{Code: verify.NewCode(burst.CodePrefix(name)), Stock: stock, PerUser: 1, Flash: true},
		probeSpec: verify.VoucherSpec{Code: verify.NewCode("probe"), Stock: probeStock, PerUser: 1, Flash: true},
		// Customers below the order count: some order twice and meet their limit.
		customers: max(n*7/10, 1),
		faultOver: make(chan struct{}),
	}
	for _, v := range []verify.VoucherSpec{t.spec, t.probeSpec} {
		if err := b.CreateVoucher(ctx, v); err != nil {
			return nil, err
		}
	}
	t.plan = load.NewPlan(t.spec.Code, load.Crowd{Requests: n, Customers: t.customers, Retry: 0.10, Seed: cfg.Seed})
	return t, nil
}

// drive sends the burst and the retrying clients' orders, strikes the fault
// cfg.FaultAt into the burst and ends it cfg.FaultFor later, probes from the
// fault on, and returns once all three are done.
func (t *traffic) drive(ctx context.Context, r *rig, sc Scenario, cfg Config) error {
	volley := make(chan load.Volley, 1)
	t.rc = load.NewRetryingClients(r.entry, t.spec.Code, int64(t.customers)+1, cfg.Attack.Timeout)
	retried := make(chan struct{})
	t.start = time.Now()
	go func() {
		volley <- load.Fire(ctx, load.ReserveURL(r.entry, t.spec.Code), t.plan, load.OrderAmount, cfg.Rate, cfg.Attack)
	}()
	go func() {
		defer close(retried)
		t.rc.Run(ctx, cfg.Rate*retryingShare, cfg.Duration)
	}()
	load.Sleep(ctx, time.Until(t.start.Add(cfg.FaultAt)))

	t.pr = newProber(r.entry, t.probeSpec.Code, cfg.RecoveryBound)
	go t.pr.run(ctx)
	t.faultStart = time.Now()
	live := startLiveness(ctx, r.entry, cfg.Attack.Timeout)
	end, faultErr := sc.Inject(ctx, r, cfg.FaultFor)
	if faultErr == nil && end != nil {
		load.Sleep(ctx, time.Until(t.faultStart.Add(cfg.FaultFor)))
		faultErr = end()
	}
	t.faultEnd = time.Now()
	live.end()
	close(t.faultOver)
	t.pr.faultEnded(t.faultEnd)
	t.volley = <-volley
	<-retried
	t.probes = t.pr.wait()
	t.live = live.wait()
	if faultErr != nil {
		return fmt.Errorf("%s: inject the fault: %w", sc.Name, faultErr)
	}
	return ctx.Err()
}

// result tallies the answers and the timings; settled is how long Redis took
// to agree with the database after the last request (-1: never).
func (t *traffic) result(sc Scenario, cfg Config, settled time.Duration, settleDetail string) *Result {
	res := &Result{
		Scenario: sc.Name, Fault: sc.Describe(cfg.FaultFor), Code: t.spec.Code, ProbeCode: t.probeSpec.Code, Stock: t.spec.Stock,
		FaultAt: t.faultStart.Sub(t.start).Seconds(), FaultSeconds: t.faultEnd.Sub(t.faultStart).Seconds(),
		Rate: cfg.Rate, Probes: len(t.probes), Statuses: map[string]int{},
		RecoveryBound: cfg.RecoveryBound.Seconds(), SettleBound: cfg.SettleBound.Seconds(),
		RecoverySeconds: -1, SettleSeconds: -1, SettleDetail: settleDetail,
	}
	_, rcShots := t.rc.Merge(load.Plan{}, nil)
	res.tally(slices.Concat(t.volley.Shots, rcShots), t.probes, t.faultStart, t.faultEnd)
	res.DuringFaultLivenessP99 = load.LatencyOf(t.live).P99
	l := answeredLatency(t.volley.Shots, rcShots, t.probes)
	res.Latency = &l
	res.RetryingOrders, res.RetryingSends = len(t.rc.Plan.Orders), len(rcShots)
	res.Replays = t.volley.Replays + t.rc.Replays.Load() + t.pr.replays.Load()
	res.Achieved = burst.Summarize(burst.Config{Label: sc.Name, Rate: cfg.Rate, Duration: cfg.Duration}, t.spec, t.plan, t.volley).AchievedRate
	if at, ok := recoveredAt(t.probes, t.faultEnd, probesInARow); ok {
		res.RecoverySeconds = at.Sub(t.faultEnd).Seconds()
	}
	if settled >= 0 {
		res.SettleSeconds = settled.Seconds()
	}
	return res
}

// answeredLatency is the latency of every request that got an answer.
func answeredLatency(shots ...[]load.Shot) load.Latency {
	var ds []time.Duration
	for _, ss := range shots {
		for _, s := range ss {
			if s.Status != 0 {
				ds = append(ds, s.Latency)
			}
		}
	}
	return load.LatencyOf(ds)
}

// judge checks the invariants on both vouchers and how the system behaved
// through the fault into res; quiet is how long after the fault's end the
// last request was answered.
func (t *traffic) judge(ctx context.Context, b *verify.Bench, res *Result, cfg Config, quiet time.Duration) error {
	all, shots := t.rc.Merge(t.plan, t.volley.Shots)
	burst, err := chaosChecks(ctx, b, t.spec, all, shots, "")
	if err != nil {
		return err
	}
	probes, err := chaosChecks(ctx, b, t.probeSpec, t.pr.plan, t.probes, "probes: ")
	if err != nil {
		return err
	}
	res.DB, res.RedisRemaining = burst.db, burst.redisRemaining
	res.Checks = append(burst.checks, probes.checks...)
	res.Checks = append(res.Checks, res.fast503Check(cfg.Fast503),
		res.recoveredCheck(cfg.RecoveryBound, countSent(t.probes, t.faultStart, t.faultEnd)),
		res.settledCheck(cfg.SettleBound, quiet))
	res.Pass = verify.Passed(res.Checks)
	return nil
}
