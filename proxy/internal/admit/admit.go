// Package admit is the admitter: it decides, without Postgres, whether a
// reserve may go to the ledger (a known code, its voucher's terms, the
// checkout token it requires, the sold-out flag, the admission window, the
// atomic Redis script batched per voucher), has the ledger write what it
// admitted, and knows which orders' retries hold a use already (admitted
// here, being written, named by another proxy, known to the flag).
package admit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
	"golang.org/x/sync/singleflight"

	"github.com/flashgate/flashgate/proxy/internal/codes"
	"github.com/flashgate/flashgate/proxy/internal/ledger"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/batch"
	"github.com/flashgate/flashgate/shared/checkout"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Config tunes the admission path.
type Config struct {
	SoldOutTTL      time.Duration // how long a local "sold out" flag answers for Redis
	VoucherCacheTTL time.Duration // how long a voucher's cached terms are used
	RedisTimeout    time.Duration // deadline of one script call
	// LedgerTimeout is LEDGER_TIMEOUT: an order handed over to the ledger is
	// parked in Redis until at least this long after (see ledger.HandOver).
	LedgerTimeout time.Duration
	Coalesce      bool // batch waiting requests per voucher into one script call
	MaxBatch      int  // largest batch per script call
	// WriteTarget sizes the admission window (admitWindow): flash reserves
	// between the gate and the ledger's answer; 0: no window.
	WriteTarget time.Duration
	WindowMax   int                   // the window's largest size (MAX_INFLIGHT)
	Registerer  prometheus.Registerer // where the admission metrics go; nil: nowhere
	// CodesRefresh is LIVE_CODES_REFRESH: how often at most a code outside
	// the set re-reads it (codes.Set); Lookups is LEDGER_LOOKUPS.
	CodesRefresh time.Duration
	Lookups      int
	// CodesClock is the set of codes' clock (when a re-read is due); nil:
	// time.Now.
	CodesClock func() time.Time
	// CheckoutKeys verify the checkout tokens of vouchers that require one
	// (CHECKOUT_TOKEN_SECRET); none: such vouchers are refused.
	CheckoutKeys checkout.Keys
}

// Admitter decides, without touching Postgres, whether a reserve may go to the
// ledger: cached voucher terms (is it a flash voucher at all), a short-lived
// sold-out flag, then the atomic Redis reserve script, one call per voucher per
// round, which decides the order's own state, pause, window, minimum and stock.
type Admitter struct {
	gate   *gate.Gate
	ledger *ledger.Client
	cfg    Config
	log    *slog.Logger
	base   context.Context

	vouchers *ristretto.Cache[string, cachedVoucher]
	soldOut  *ristretto.Cache[string, *soldOutFlag]
	admitted *ristretto.Cache[string, admittedOrder]       // code/orderId -> the orders answered 201 here (AdmittedHere)
	batcher  *batch.Batcher[string, *pending, gate.Result] // script calls, each handing what it admitted to writer
	writer   *ledger.Writer                                // admitted claims to the ledger
	breaker  *gobreaker.CircuitBreaker[any]
	window   *admitWindow // nil: none
	metrics  *admitMetrics
	codes    *codes.Set          // every voucher's code: others are answered 404 here
	lookups  *codes.LookupBudget // LEDGER_LOOKUPS

	metaFlight, warmFlight, soldOutFlight singleflight.Group

	writing  writes           // admitted claims being written, for giveBack
	peers    *peers           // the orders admitted through the other proxies; nil: none shared (SharePeers)
	handOver *ledger.HandOver // admissions whose fate is unknown, to the ledger

	flagHits atomic.Int64 // requests answered by the sold-out flag

	unverifiable sync.Map // codes requiring a checkout token this proxy cannot verify, logged once each

	// forgetMu orders dropping a voucher's flag and terms (forget, Unflag)
	// against setting them from a read made before the drop: a read that
	// started before epoch moved is not cached.
	forgetMu sync.Mutex
	epoch    uint64
}

// New wires the admission path. base is the service's lifetime: batched
// script calls run under it, not under any one request.
func New(base context.Context, g *gate.Gate, lc *ledger.Client, cfg Config, log *slog.Logger) (*Admitter, error) {
	vouchers, err := ristretto.NewCache(&ristretto.Config[string, cachedVoucher]{
		NumCounters: 100_000, MaxCost: 10_000, BufferItems: 64,
	})
	if err != nil {
		return nil, fmt.Errorf("voucher cache: %w", err)
	}
	soldOut, err := ristretto.NewCache(&ristretto.Config[string, *soldOutFlag]{
		NumCounters: 100_000, MaxCost: 10_000, BufferItems: 64,
	})
	if err != nil {
		return nil, fmt.Errorf("sold-out cache: %w", err)
	}
	admitted, err := newAdmittedCache()
	if err != nil {
		return nil, fmt.Errorf("admitted cache: %w", err)
	}
	a := &Admitter{
		gate: g, ledger: lc, cfg: cfg, log: log, base: base,
		vouchers: vouchers, soldOut: soldOut, admitted: admitted,
	}
	if cfg.WriteTarget > 0 {
		a.window = newAdmitWindow(cfg.WriteTarget, cfg.WindowMax, log)
	}
	a.lookups = codes.NewLookupBudget(cfg.Lookups)
	a.codes = codes.New(codes.FromLedger(lc, a.lookups), cfg.CodesRefresh, cfg.RedisTimeout, cfg.CodesClock, log)
	a.breaker = gobreaker.NewCircuitBreaker[any](gobreaker.Settings{
		Name:        "redis",
		MaxRequests: 1,
		Timeout:     time.Second, // open for 1s, then one trial call
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 5 },
		IsExcluded:  func(err error) bool { return errors.Is(err, context.Canceled) },
		// Redis answered about one voucher's malformed data: that voucher's
		// requests fail, the others' must not (see gate.ErrBadState).
		IsSuccessful: func(err error) bool { return err == nil || errors.Is(err, gate.ErrBadState) },
		OnStateChange: func(name string, from, to gobreaker.State) {
			log.Warn("redis circuit breaker", "from", from.String(), "to", to.String())
		},
	})
	a.metrics = newAdmitMetrics(cfg.Registerer, a)
	a.batcher = batch.New(base, cfg.MaxBatch, a.admitBatch)
	a.batcher.ObserveSizes(func(n int) { a.metrics.batchSize.Observe(float64(n)) })
	a.handOver = ledger.NewHandOver(base, lc, log)
	a.handOver.RecordWith(func(ctx context.Context, code string, orderIDs []string) error {
		ctx, cancel := context.WithTimeout(ctx, cfg.RedisTimeout)
		defer cancel()
		return a.gate.Park(ctx, code, orderIDs, time.Now().Add(cfg.LedgerTimeout))
	})
	a.writer = ledger.NewWriter(base, lc, cfg.Coalesce, cfg.MaxBatch)
	return a, nil
}

// Close frees the caches.
func (a *Admitter) Close() {
	a.vouchers.Close()
	a.soldOut.Close()
	a.admitted.Close()
	if a.peers != nil {
		a.peers.held.Close() // a message taken after it is dropped (ristretto refuses a Set once closed)
	}
}

// ReserveVetted runs a claim that Vet passed (v is its voucher's terms)
// through the edge and, if admitted, through the ledger, whose answer is
// relayed as it is. It never answers 201 unless the script said RESERVED or
// DUPLICATE and the ledger wrote (or had) the reservation. Each outcome is counted in
// flashgate_reserve_total.
func (a *Admitter) ReserveVetted(ctx context.Context, code string, cl voucher.Claim, v voucher.Voucher) (ledger.Reply, error) {
	rep, err := a.decide(ctx, code, cl, v)
	a.count(rep, err)
	return rep, err
}

// count counts an outcome in flashgate_reserve_total.
func (a *Admitter) count(rep ledger.Reply, err error) {
	outcome := rep.Outcome()
	if err != nil {
		if outcome = voucher.ErrorCode(err); outcome == "" {
			outcome = voucher.CodeUnavailable
		}
	}
	a.metrics.outcome.Get(outcome).Inc()
}

func (a *Admitter) decide(ctx context.Context, code string, cl voucher.Claim, v voucher.Voucher) (ledger.Reply, error) {
	// No eligibility check here: a retry of an order is answered from the
	// order's own state before the voucher's terms, and only Redis (flash) or
	// the ledger (standard) knows that state and the terms of this second.
	if !v.FlashSale {
		// Standard vouchers: the ledger's guarded UPDATE is all they need.
		return a.ledger.Do(ctx, "reserve", http.MethodPost, api.ReservationsPath(code), cl)
	}
	if a.flagged(code, cl.OrderID) {
		a.flagHits.Add(1)
		return ledger.Reply{}, voucher.ErrOutOfStock
	}
	if a.window != nil && !a.window.open() && !a.holdsUse(ctx, code, cl) {
		return a.window.refuse(requestID(ctx)), nil
	}
	return a.reserveFlash(ctx, code, cl, admittedFor(v))
}

// holdsUse reports whether Redis holds a use for cl's order and customer: a
// retry of an admitted order, which takes no new use and is answered from its
// row, so a full window never refuses it. Asked only of a full window; a
// failure to ask answers false (the request is refused, as it was).
func (a *Admitter) holdsUse(ctx context.Context, code string, cl voucher.Claim) bool {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.RedisTimeout)
	defer cancel()
	customer, held, err := a.gate.Holder(ctx, code, cl.OrderID)
	if err != nil || !held || customer != cl.CustomerID {
		return false
	}
	a.window.spared.Add(1)
	return true
}

// requestID is the request id of ctx when it is a request's gin.Context.
func requestID(ctx context.Context) string {
	if c, ok := ctx.(*gin.Context); ok {
		return httpx.RequestIDFrom(c)
	}
	return ""
}

// reserveFlash takes a use in Redis and, when admitted, has the ledger write
// the reservation, counted in the admission window meanwhile; an order
// answered 201 is remembered for hold (AdmittedHere).
func (a *Admitter) reserveFlash(ctx context.Context, code string, cl voucher.Claim, hold time.Duration) (ledger.Reply, error) {
	// Redis may have lost the voucher (restart, flush, eviction): then the
	// ledger loads it from the database, once for all waiting requests.
	began := time.Now()
	var w written
	res, err := gate.AdmitWarm(ctx,
		func(ctx context.Context) (gate.Result, error) {
			w = a.admitThenWrite(ctx, code, cl, hold)
			return w.res, w.gateErr
		},
		func(ctx context.Context) error { return a.warmup(ctx, code) })
	if !w.sent {
		w.gated = time.Now()
	}
	a.metrics.stages.Get(stageGate).Observe(w.gated.Sub(began).Seconds())
	if err != nil {
		return ledger.Reply{}, err
	}
	// Reserved, Duplicate and Finished went to the ledger's admitted write: it
	// writes a new order and answers a known one from its row (replay,
	// ORDER_CONFLICT for another amount, RESERVATION_RELEASED or _REFUNDED).
	if err := res.Err(); err != nil {
		if _, domain := err.(*voucher.Error); domain {
			return ledger.Reply{}, err // an answer, not a fault: it needs no context (and its pre-encoded body)
		}
		return ledger.Reply{}, fmt.Errorf("reserve %s: %w", code, err)
	}
	rep, err := w.rep, w.writeErr
	a.metrics.stages.Get(stageWrite).Observe(time.Since(w.start).Seconds())
	alone := w.done()
	if a.window != nil {
		var took time.Duration
		if err == nil {
			took = time.Since(w.start)
		}
		a.window.leave(took)
	}
	switch {
	case err == nil && rep.Status == http.StatusCreated:
		a.remember(code, cl, hold)
	case res == gate.Reserved && alone && notDelivered(rep, err):
		a.giveBack(code, cl.OrderID)
	case err != nil && !notDelivered(rep, err):
		// The write may or may not have reached the ledger, which may have
		// died with it: the ledger decides, once no write can commit.
		a.handOver.Give(code, cl.OrderID)
	}
	return rep, err
}

// admit runs the reserve script for one claim, without coalescing (with it,
// admitThenWrite queues the claim in the voucher's batch).
func (a *Admitter) admit(ctx context.Context, code string, cl voucher.Claim) (gate.Result, error) {
	item := gate.Item{CustomerID: cl.CustomerID, OrderID: cl.OrderID, OrderAmount: cl.OrderAmount}
	a.metrics.batchSize.Observe(1)
	rs, err := a.reserveBatch(ctx, code, []gate.Item{item})
	if err != nil {
		return 0, err
	}
	return rs[0], nil
}

// gateErr is a coalesced script call's error as the proxy answers it: a
// fault (unavailable), whatever kept Redis's answer from the claim.
func gateErr(code string, err error) error {
	if err != nil && !errors.Is(err, voucher.ErrUnavailable) {
		err = fmt.Errorf("reserve %s: %w: %w", code, err, voucher.ErrUnavailable)
	}
	return err
}

// reserveBatch is one script call for a batch of one voucher's items, under a
// deadline and the circuit breaker, so that a dead or slow Redis costs a fast
// 503 rather than a pile of waiting requests.
func (a *Admitter) reserveBatch(ctx context.Context, code string, items []gate.Item) ([]gate.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.RedisTimeout)
	defer cancel()
	var remaining int64
	out, err := a.breaker.Execute(func() (any, error) {
		rs, rem, err := a.gate.Reserve(ctx, code, items)
		remaining = rem
		return rs, err
	})
	if err != nil {
		a.metrics.redisErrors.Inc()
		if scriptMayHaveRun(err) {
			// Its reply is lost, not its effect: the script may have taken
			// uses for these orders, which nobody will write now.
			ids := make([]string, len(items))
			for i, it := range items {
				ids[i] = it.OrderID
			}
			a.handOver.Give(code, ids...)
		}
		return nil, fmt.Errorf("reserve %s in redis: %w: %w", code, err, voucher.ErrUnavailable)
	}
	rs := out.([]gate.Result)
	if len(rs) == 0 || rs[0] == gate.NotLoaded {
		return rs, nil
	}
	a.metrics.remaining.Set(float64(remaining), code)
	if remaining <= 0 {
		a.flagSoldOut(code)
	}
	return rs, nil
}

// warmup asks the ledger to load a voucher into Redis, one call per voucher at
// a time however many requests saw NOT_LOADED.
func (a *Admitter) warmup(ctx context.Context, code string) error {
	_, err, _ := a.warmFlight.Do(code, func() (any, error) {
		a.log.Info("voucher not loaded in redis: asking the ledger to load it", "code", code)
		return nil, a.ledger.Warmup(ctx, code)
	})
	return err
}

// scriptMayHaveRun reports whether a failed reserve script call may have run
// in Redis all the same: anything but a call the breaker refused, a connection
// that could not be made, or the script's own refusal (it refuses before any
// write: gate.ErrBadState).
func scriptMayHaveRun(err error) bool {
	return !errors.Is(err, gate.ErrBadState) && !ledger.NeverSent(err)
}
