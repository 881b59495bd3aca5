package burst

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/flashgate/flashgate/loadtest/internal/load"
)

// TrafficLine is one request of a recorded traffic file (JSON lines): when it
// left, in seconds since the first, and the reserve it sent.
type TrafficLine struct {
	T           float64 `json:"t"`
	Code        string  `json:"code"`
	CustomerID  int64   `json:"customerId"`
	OrderID     string  `json:"orderId"`
	OrderAmount int64   `json:"orderAmount"`
}

// Replay is recorded traffic to send instead of a generated crowd: the plan
// (orders in their first-sent order, requests in send order, retries where an
// orderId came again) and when each request leaves.
type Replay struct {
	Plan load.Plan
	At   []time.Duration
}

// writeTraffic records a burst's requests on voucher code to path: request i
// at the time its answer says it left, or at i/rate when it got none.
func writeTraffic(path, code string, plan load.Plan, shots []load.Shot, rate float64) error {
	sent := make([]time.Time, len(plan.Requests))
	var first time.Time
	for _, s := range shots {
		if s.Req >= 0 && int(s.Req) < len(sent) {
			sent[s.Req] = s.At
		}
		if !s.At.IsZero() && (first.IsZero() || s.At.Before(first)) {
			first = s.At
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("record traffic: %w", err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for i, idx := range plan.Requests {
		t := float64(i) / max(rate, 1)
		if !sent[i].IsZero() {
			t = sent[i].Sub(first).Seconds()
		}
		o := plan.Orders[idx]
		line := TrafficLine{T: t, Code: code, CustomerID: o.Customer, OrderID: o.ID, OrderAmount: cmp.Or(o.Amount, load.OrderAmount)}
		if err := enc.Encode(line); err != nil {
			f.Close()
			return fmt.Errorf("record traffic: %w", err)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("record traffic: %w", err)
	}
	return f.Close()
}

// readTraffic reads a traffic file for a replay at speed x: each recorded
// orderId becomes an order (retries stay retries of the same order, so a
// replay is checked as a burst is), with its customer and amount; the times
// are divided by speed. The file holds one voucher's traffic; planFor names
// the orders after the voucher they are replayed on.
func readTraffic(r io.Reader, speed float64) (Replay, error) {
	if speed <= 0 {
		return Replay{}, errors.New("--speed must be above 0")
	}
	var lines []TrafficLine
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var l TrafficLine
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			return Replay{}, fmt.Errorf("line %d: %w", n, err)
		}
		switch {
		case l.OrderID == "" || l.CustomerID <= 0 || l.T < 0 || l.OrderAmount < 0:
			return Replay{}, fmt.Errorf("line %d: needs t >= 0, customerId > 0, orderId and orderAmount >= 0", n)
		case len(lines) > 0 && l.Code != lines[0].Code:
			return Replay{}, fmt.Errorf("line %d: voucher %s, but the file began with %s: one voucher per file", n, l.Code, lines[0].Code)
		}
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		return Replay{}, err
	}
	if len(lines) == 0 {
		return Replay{}, errors.New("the traffic file holds no request")
	}
	slices.SortStableFunc(lines, func(a, b TrafficLine) int { return cmpFloat(a.T, b.T) })
	rp := Replay{}
	index := map[string]int32{}
	for _, l := range lines {
		i, seen := index[l.OrderID]
		if !seen {
			i = int32(len(rp.Plan.Orders))
			index[l.OrderID] = i
			rp.Plan.Orders = append(rp.Plan.Orders, load.Order{Customer: l.CustomerID, Amount: l.OrderAmount})
		} else {
			rp.Plan.Retries++
		}
		rp.Plan.Requests = append(rp.Plan.Requests, i)
		rp.At = append(rp.At, time.Duration((l.T-lines[0].T)/speed*float64(time.Second)))
	}
	return rp, nil
}

// planFor is the replay's plan with its orders named after voucher code as a
// burst's are (code-<base 36>): order_id is unique over all vouchers, so a
// file replays again and again on fresh vouchers.
func (rp Replay) planFor(code string) load.Plan {
	p := load.Plan{Orders: slices.Clone(rp.Plan.Orders), Requests: rp.Plan.Requests, Retries: rp.Plan.Retries}
	for i := range p.Orders {
		p.Orders[i].ID = code + "-" + strconv.FormatInt(int64(i), 36)
	}
	return p
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// resultsFile opens path for vegeta's results (gob, as `vegeta attack` writes
// them), or returns nil, nil when path is empty.
func resultsFile(path string) (*os.File, vegeta.Encoder, error) {
	if path == "" {
		return nil, nil, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, fmt.Errorf("vegeta results: %w", err)
	}
	return f, vegeta.NewEncoder(f), nil
}

// RunReplay is `loadtest replay [flags] FILE`.
func RunReplay(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("replay", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: loadtest replay [flags] FILE\n\n"+
			"Sends the reserves of a traffic file (JSON lines {\"t\", \"code\", \"customerId\", \"orderId\", \"orderAmount\"},\n"+
			"as `loadtest burst --record FILE` writes) at their recorded times (divided by --speed) to a fresh\n"+
			"voucher, and checks the invariants as a burst does.\n\nflags:\n")
		fs.PrintDefaults()
	}
	c := burstCmd{Config: Config{Label: "replay"}}
	cfg := &c.Config
	speed := fs.Float64("speed", 1, "replay speed: 2 sends the traffic twice as fast")
	fs.IntVar(&cfg.Stock, "stock", 1000, "the fresh voucher's uses (totalLimit)")
	fs.IntVar(&cfg.PerUser, "per-user", 1, "uses per customer (perUserLimit)")
	fs.BoolVar(&cfg.Flash, "flash", true, "flash voucher (Redis gate); false: standard voucher")
	fs.DurationVar(&cfg.StatsWait, "stats-wait", 0, "measure Postgres commits per admitted order after this wait (0: do not)")
	load.AttackFlags(fs, &cfg.Attack)
	check := commonBurstFlags(fs, &c, "replay")
	_ = fs.Parse(args)
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("replay needs one traffic file")
	}
	if err := check(); err != nil {
		return err
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	// Read before anything starts, so that a bad file fails at once.
	rp, err := readTraffic(f, *speed)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	cfg.Replay = &rp
	cfg.Duration = max(rp.At[len(rp.At)-1], time.Millisecond)
	cfg.Rate = float64(len(rp.At)) / cfg.Duration.Seconds()
	return c.run(ctx)
}
