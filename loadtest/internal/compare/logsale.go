package compare

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/loadtest/internal/verify"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/voucher"
)

// WrkLogSale is a writePath log voucher sold out by wrk flat out: what the
// 201s cost the consumer behind them. Its lag is the ledger's own gauges
// (flashgate_admissions_lag_records, summed over partitions, and
// flashgate_admissions_lag_seconds, the largest), which the ledger measures
// from the broker every second (the consumer group's committed offsets).
type WrkLogSale struct {
	Stock       int     `json:"stock"`
	Connections int     `json:"connections"`
	Seconds     float64 `json:"seconds"` // wrk's run, sell-out and the refusals after it
	Rate        float64 `json:"rate"`    // answers a second
	P99Ms       float64 `json:"p99Ms"`
	Admitted    int     `json:"admitted"`   // answered 201
	RedisHeld   int     `json:"redisHeld"`  // uses the gate held once Postgres caught up
	Used        int     `json:"used"`       // used_count once Postgres caught up
	MaxLag      Lag     `json:"maxLag"`     // the most seen while the sale ran and was written
	LagAtEnd    Lag     `json:"lagAtEnd"`   // at the last answer
	LagAfter    Lag     `json:"lagAfter"`   // once Postgres held every 201
	ToPostgres  float64 `json:"toPostgres"` // seconds from the last answer until used_count held every 201
	LagReadable bool    `json:"lagReadable"`
}

// Lag is the admissions consumer's lag as the ledger's /metrics tells it.
type Lag struct {
	Records int64   `json:"records"`
	Seconds float64 `json:"seconds"`
}

// wrkLogSale sells a fresh log voucher of LogSale uses to new customers, wrk
// flat out for long enough at about rate answers a second, sampling the
// consumer's lag throughout, then waits until Postgres holds every 201.
func (c *comparer) wrkLogSale(ctx context.Context, b *verify.Bench, rate float64) (*WrkLogSale, error) {
	s := &WrkLogSale{Stock: c.cfg.Wrk.LogSale, Connections: c.cfg.Wrk.Conns}
	code := verify.NewCode("wrk-logsale")
	spec := verify.VoucherSpec{Code: code, Stock: s.Stock, PerUser: 1, Flash: true, WritePath: voucher.WritePathLog}
	if err := createVoucherRetrying(ctx, b, spec); err != nil {
		return nil, err
	}
	d := logSaleDuration(s.Stock, rate)
	fmt.Fprintf(c.log, "wrk log sale: %d uses of a writePath log voucher, %d connections flat out for %s\n", s.Stock, s.Connections, d)
	stop := c.sampleLag(ctx, b.LedgerURL, &s.MaxLag)
	script := freshOrders(api.ReservationsPath(code), code+"-", 0, load.OrderAmount)
	r, err := runWrk(ctx, b.URL, script, s.Connections, d)
	end := time.Now()
	if err != nil {
		stop()
		return nil, fmt.Errorf("log sale: %w", err)
	}
	s.Seconds, s.Rate, s.P99Ms, s.Admitted = d.Seconds(), r.Rate, r.P99Ms, int(r.Requests-r.Non2xx)
	s.LagAtEnd, _ = readLag(ctx, b.LedgerURL)
	_, err = b.WaitUsed(ctx, code, s.Admitted, logWriteWait)
	s.ToPostgres = time.Since(end).Seconds()
	stop()
	if err != nil {
		return nil, fmt.Errorf("log sale: %w", err)
	}
	s.LagAfter, s.LagReadable = readLag(ctx, b.LedgerURL)
	if s.Used, err = b.UsedCount(ctx, code); err != nil {
		return nil, err
	}
	if st, loaded, err := b.RedisState(ctx, code); err == nil && loaded {
		s.RedisHeld = s.Stock - int(st.Remaining)
	}
	fmt.Fprintf(c.log, "  %s\n", s.line())
	return s, nil
}

// logSaleDuration is how long wrk runs to sell stock at about rate answers
// a second (the flash-log path's maximum): half as long again, and between
// 5 s and a minute; 30 s when the rate is not known.
func logSaleDuration(stock int, rate float64) time.Duration {
	if rate <= 0 {
		return 30 * time.Second
	}
	secs := math.Ceil(1.5*float64(stock)/rate) + 1
	return time.Duration(min(max(secs, 5), 60)) * time.Second
}

// sampleLag reads the ledger's lag every 100 ms into most (the largest
// records and seconds seen) until stop is called.
func (c *comparer) sampleLag(ctx context.Context, ledgerURL string, most *Lag) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if l, ok := readLag(ctx, ledgerURL); ok {
				most.Records, most.Seconds = max(most.Records, l.Records), max(most.Seconds, l.Seconds)
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}

// readLag reads the consumer's lag from the ledger's /metrics; ok is false
// when it could not, or the ledger has no consumer yet.
func readLag(ctx context.Context, ledgerURL string) (Lag, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ledgerURL+api.MetricsPath, nil)
	if err != nil {
		return Lag{}, false
	}
	resp, err := wrkHTTP.Do(req)
	if err != nil {
		return Lag{}, false
	}
	defer resp.Body.Close()
	return parseLag(resp.Body)
}

// parseLag reads the admissions lag gauges of a Prometheus text exposition:
// the records of every partition summed, the largest seconds. ok is false
// when neither gauge is there (no partition written yet).
func parseLag(r io.Reader) (l Lag, ok bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		records := strings.HasPrefix(line, "flashgate_admissions_lag_records{") || strings.HasPrefix(line, "flashgate_admissions_lag_records ")
		seconds := strings.HasPrefix(line, "flashgate_admissions_lag_seconds{") || strings.HasPrefix(line, "flashgate_admissions_lag_seconds ")
		if !records && !seconds {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		ok = true
		if records {
			l.Records += int64(v)
		} else {
			l.Seconds = max(l.Seconds, v)
		}
	}
	return l, ok
}

// line is the log sale in one sentence.
func (s *WrkLogSale) line() string {
	lag := "the ledger's lag gauges could not be read"
	if s.LagReadable {
		lag = fmt.Sprintf("the consumer's lag at most %d records / %.2f s while it ran and was written, %d records / %.2f s at the last answer, %d records / %.2f s once written",
			s.MaxLag.Records, s.MaxLag.Seconds, s.LagAtEnd.Records, s.LagAtEnd.Seconds, s.LagAfter.Records, s.LagAfter.Seconds)
	}
	return fmt.Sprintf("the %d-use flash-log sale, wrk flat out (%d connections, %.0f s): %d answered 201 (%.0f answers/s, p99 %.1f ms); %s; "+
		"Postgres held every 201 %.2f s after the last answer (used_count %d, Redis held %d).",
		s.Stock, s.Connections, s.Seconds, s.Admitted, s.Rate, s.P99Ms, lag, s.ToPostgres, s.Used, s.RedisHeld)
}
