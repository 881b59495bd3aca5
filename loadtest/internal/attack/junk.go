package attack

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
)

// junkSizes size the junk attack: a real sale at Rate for Duration on a
// voucher of Stock uses, once alone and once beside a flood of Workers
// clients that each send a reserve to a random, never-created code as soon
// as the last was answered.
type junkSizes struct {
	Rate     float64
	Duration time.Duration
	Stock    int
	Workers  int
}

var (
	junkFull  = junkSizes{Rate: 1000, Duration: 5 * time.Second, Stock: 100_000, Workers: 64}
	junkShort = junkSizes{Rate: 1000, Duration: 2 * time.Second, Stock: 100_000, Workers: 16}
)

const (
	// statsWait is how long Postgres 15+ may hold an idle backend's counters
	// before pg_stat_database shows them (PGSTAT_IDLE_INTERVAL is 10 s).
	statsWait = 11 * time.Second
	// junkCommitShare is "near 0": the flood's own commits, at most this
	// share of its requests (before item 1 of #25, about 94% of them).
	junkCommitShare = 0.01
	// junkP99Ratio bounds the sale's p99 beside the flood, as a multiple of
	// its p99 alone in the same run.
	junkP99Ratio = 1.5
	// writeBatches counts the ledger's group commits: the sale's own commits.
	writeBatches = "flashgate_ledger_write_batch_size_count"
	// httpRequests counts each service's requests by route, method and status.
	httpRequests = "flashgate_http_request_duration_seconds_count"
)

// junkPhase is what one phase of the junk attack measured.
type junkPhase struct {
	sale      load.Volley
	flood     floodCount
	commits   int64   // pg_stat_database xact_commit over the phase and its statsWait
	batches   float64 // the ledger's group commits over it: the sale's own
	lookups   float64 // the ledger's GETs of one voucher by code answered 404
	took      time.Duration
	p99, n503 float64
}

// runJunk measures a sale alone, then the same sale beside a flat-out junk
// flood, on one stack.
func runJunk(ctx context.Context, cfg Config) (*Result, error) {
	z := junkFull
	if cfg.Short {
		z = junkShort
	}
	r, err := startRig(ctx, cfg, Auth{}, nil, nil)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	codes := make([]string, 3)
	for i := range codes {
		if codes[i], err = r.sale(ctx, "junk", z.Stock); err != nil {
			return nil, err
		}
	}
	// A short sale first, unmeasured: the first phase is not the stack's warm-up.
	sendSale(ctx, r, codes[0], z.Rate, time.Second, 1)
	alone, err := r.junkPhase(ctx, codes[1], z, 0)
	if err != nil {
		return nil, err
	}
	flooded, err := r.junkPhase(ctx, codes[2], z, z.Workers)
	if err != nil {
		return nil, err
	}
	return judgeJunk(z, alone, flooded), nil
}

// junkPhase sells code at z's rate beside a flood of workers (none: alone),
// then waits statsWait and reads what Postgres and the ledger counted.
func (r *rig) junkPhase(ctx context.Context, code string, z junkSizes, workers int) (junkPhase, error) {
	var p junkPhase
	m0, err := r.ledgerMetrics(ctx)
	if err != nil {
		return p, err
	}
	x0, err := r.bench.Commits(ctx)
	if err != nil {
		return p, err
	}
	start := time.Now()
	floodCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if workers > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.flood = flood(floodCtx, r.st.ProxyURL, workers)
		}()
		load.Sleep(ctx, 200*time.Millisecond) // the flood is at full speed when the sale starts
	}
	p.sale = sendSale(ctx, r, code, z.Rate, z.Duration, 2)
	stop()
	wg.Wait()
	load.Sleep(ctx, statsWait)
	if err := ctx.Err(); err != nil {
		return p, err
	}
	m1, err := r.ledgerMetrics(ctx)
	if err != nil {
		return p, err
	}
	x1, err := r.bench.Commits(ctx)
	if err != nil {
		return p, err
	}
	p.took = time.Since(start)
	p.commits = x1 - x0 - 1 // less the harness's own first read
	p.batches = metricSum(m1, writeBatches) - metricSum(m0, writeBatches)
	p.lookups = codeLookups(m1) - codeLookups(m0)
	lat := make([]time.Duration, 0, len(p.sale.Shots))
	for _, s := range p.sale.Shots {
		lat = append(lat, s.Latency)
		if s.Status == http.StatusServiceUnavailable {
			p.n503++
		}
	}
	p.p99 = load.LatencyOf(lat).P99
	return p, nil
}

// codeLookups counts the ledger's GETs of one voucher by code that found no
// voucher: a proxy asking about a code it does not know, whatever the route
// (the admin view, or an internal one), its reservations aside.
func codeLookups(page string) float64 {
	return metricSumFunc(page, httpRequests, func(labels string) bool {
		_, route, _ := strings.Cut(labels, `route="`)
		route, _, _ = strings.Cut(route, `"`)
		return strings.Contains(labels, `service="ledger"`) && strings.Contains(labels, `method="GET"`) &&
			strings.Contains(labels, `code="404"`) && strings.Contains(route, "/vouchers/:code") &&
			!strings.Contains(route, "reservations")
	})
}

// sendSale sells code to a crowd of distinct customers at rate for d.
func sendSale(ctx context.Context, r *rig, code string, rate float64, d time.Duration, seed uint64) load.Volley {
	n := load.RequestCount(rate, d)
	plan := load.NewPlan(code, load.Crowd{Requests: n, Customers: n, Seed: seed})
	o := load.DefaultAttack
	o.Timeout = 5 * time.Second
	return load.Fire(ctx, load.ReserveURL(r.st.ProxyURL, code), plan, load.OrderAmount, rate, o)
}

// floodCount is what a junk flood sent and was answered.
type floodCount struct {
	sent     int
	statuses statusCount
	took     time.Duration
}

// flood sends reserves of random, never-created codes from workers clients,
// each as soon as its last was answered, until ctx ends.
func flood(ctx context.Context, proxyURL string, workers int) floodCount {
	client := clientFrom("", workers)
	defer client.CloseIdleConnections()
	start := time.Now()
	counts := make([]statusCount, workers)
	var wg sync.WaitGroup
	for w := range workers {
		counts[w] = statusCount{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			for i := 0; ctx.Err() == nil; i++ {
				code := "junk" + strconv.FormatUint(rng.Uint64(), 36)
				body := reserveBody(fmt.Sprintf("%s-%d", code, i), rng.Int64N(1_000_000)+1)
				a, err := call(ctx, client, http.MethodPost, load.ReserveURL(proxyURL, code), "", body)
				switch {
				case ctx.Err() != nil:
				case err != nil:
					counts[w]["transport error"]++
				default:
					counts[w][a.String()]++
				}
			}
		}()
	}
	wg.Wait()
	fc := floodCount{statuses: statusCount{}, took: time.Since(start)}
	for _, c := range counts {
		for k, n := range c {
			fc.statuses[k] += n
			fc.sent += n
		}
	}
	return fc
}

// judgeJunk compares the sale beside the flood with the sale alone.
func judgeJunk(z junkSizes, alone, flooded junkPhase) *Result {
	res := &Result{Scenario: "junk"}
	fl := flooded.flood
	res.figure("sale alone: %d requests at %.0f/s for %s: p99 %.1f ms, 503 x %.0f", len(alone.sale.Shots), z.Rate, z.Duration, alone.p99, alone.n503)
	res.figure("sale beside the flood: p99 %.1f ms, 503 x %.0f", flooded.p99, flooded.n503)
	res.figure("flood: %d workers flat out, %d requests (%.0f/s): %s", z.Workers, fl.sent, float64(fl.sent)/fl.took.Seconds(), fl.statuses)
	// Postgres commits that are neither the sale's group commits nor the
	// background's (the outbox's polls, the jobs), at the rate measured
	// while the sale ran alone.
	background := (float64(alone.commits) - alone.batches) / alone.took.Seconds()
	junkCommits := float64(flooded.commits) - flooded.batches - background*flooded.took.Seconds()
	res.figure("Postgres commits: alone %d (group commits %.0f), beside the flood %d (group commits %.0f); background %.1f/s",
		alone.commits, alone.batches, flooded.commits, flooded.batches, background)
	res.figure("ledger lookups by code answered 404: alone %.0f, beside the flood %.0f", alone.lookups, flooded.lookups)

	res.want("sale's 503s beside the flood = 0", flooded.n503 == 0, "%.0f x 503 of %d", flooded.n503, len(flooded.sale.Shots))
	res.want("sale's p99 beside the flood <= 1.5x alone", flooded.p99 <= junkP99Ratio*alone.p99,
		"%.1f ms vs %.1f ms alone (%.2fx)", flooded.p99, alone.p99, flooded.p99/max(alone.p99, 0.001))
	res.want("Postgres commits of the flood near 0", junkCommits <= junkCommitShare*float64(fl.sent),
		"%.0f commits for %d junk requests (want <= %.0f%% of them)", junkCommits, fl.sent, 100*junkCommitShare)
	res.want("ledger lookups of unknown codes = 0", flooded.lookups == 0, "%.0f lookups answered 404 during the flood", flooded.lookups)
	answered := fl.sent - fl.statuses["transport error"]
	res.want("the flood was answered", fl.sent > 0 && answered >= fl.sent*9/10, "%d of %d junk requests answered", answered, fl.sent)
	return res.finish()
}
