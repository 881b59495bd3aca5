package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/loadtest/internal/stack"
	"github.com/flashgate/flashgate/loadtest/internal/verify"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/voucher"
)

// log-sale is issue 26's first done-when at full size: a writePath log
// voucher sold at full speed ends with Postgres = Redis = the 201s exactly,
// through a ledger kill -9 and a broker restart during the sale
// (systemtest's TestLogPathSaleThroughProxy is the same at 1,000 uses).
const (
	logSaleStock      = 50_000 // the voucher's uses unless --stock (--short: logSaleShortStock)
	logSaleShortStock = 1_000
	logSaleClients    = 64  // closed-loop clients, one order in flight each
	logSaleOrders     = 3   // orders per customer, one customer per use
	logSalePerUser    = 2   // perUserLimit: 2 uses' worth of orders for every use
	logSaleAgainEvery = 5   // every fifth order is sent once more after its answer
	logSaleKillAt     = 0.3 // the ledger is killed once this share of the uses was answered 201
	logSaleBrokerAt   = 0.65
	logSaleOrderWait  = time.Minute     // an order without a final answer this long fails the run
	logSaleWriteWait  = 2 * time.Minute // for the consumer to write every 201 after the sale
)

// The checks only log-sale makes.
const (
	checkLogFaults     = "both faults struck mid-sale"
	checkLogExact      = "the 201s = Postgres = Redis, order for order"
	checkLogSoldOut    = "every use sold"
	checkLogKept201    = "every 201 kept"
	checkLogNoDead     = "nothing dead-lettered"
	checkLogPerUser    = "no customer over perUserLimit"
	checkLogAllAnswers = "every order answered"
)

// tuneLogSale gives the sale its uses: --stock, else 50,000 (--short: 1,000).
func tuneLogSale(c Config) Config {
	if c.Stock == 0 {
		c.Stock = logSaleStock
		if c.Short {
			c.Stock = logSaleShortStock
		}
	}
	return c
}

// runLogSale sells a log voucher of cfg.Stock uses (perUserLimit 2) to
// cfg.Stock customers, 3 orders each, through 64 closed-loop clients as fast
// as the stack answers; the ledger is killed (-9) at 30% of the uses answered
// 201 and started again after --fault-for, and the broker (kfake, its log on
// disk) stopped at 65% and started again after --fault-for. Once the consumer
// wrote every 201: the orders answered 201, Postgres's rows, used_count and
// the uses Redis took are the same, order for order, with nothing in the
// dead-letter topic.
func runLogSale(ctx context.Context, pg *devstack.Postgres, sc Scenario, cfg Config) (*Result, error) {
	sc.TwoLedgers = cfg.Ledgers == 2
	r, err := startRig(ctx, pg, sc, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: start the system: %w", sc.Name, err)
	}
	defer r.Close(ctx)
	spec := verify.VoucherSpec{Code: verify.NewCode("log-sale"), Stock: cfg.Stock, PerUser: logSalePerUser,
		Flash: true, WritePath: voucher.WritePathLog}
	if err := r.bench.CreateVoucher(ctx, spec); err != nil {
		return nil, fmt.Errorf("%s: %w", sc.Name, err)
	}
	s := newClosedSale(r.entry, spec.Code, logSaleClients)
	if err := s.known(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", sc.Name, err)
	}
	faults := make(chan []string, 1)
	var recovered time.Duration
	brokerDown := cfg.BrokerDown
	if brokerDown == 0 {
		brokerDown = cfg.FaultFor
	}
	go func() { faults <- s.strike(ctx, r, cfg.Stock, cfg.FaultFor, brokerDown, &recovered) }()
	start := time.Now()
	s.run(ctx, cfg.Stock, logSaleOrders)
	end := time.Now()
	struck := <-faults
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	created := s.created()
	toPG, waitErr := r.bench.WaitUsed(ctx, spec.Code, len(created), logSaleWriteWait)
	fault := fmt.Sprintf("%s [this run: %d ledgers, the ledger down %s, the broker down %s]",
		sc.Describe(cfg.FaultFor), max(cfg.Ledgers, 1), cfg.FaultFor, brokerDown)
	res := &Result{Scenario: sc.Name, Fault: fault, Code: spec.Code, Stock: spec.Stock,
		FaultSeconds: cfg.FaultFor.Seconds(), Statuses: s.statuses, ErrorSamples: s.errorSamples,
		Requests: s.sends, Created: len(created), Refused: s.refused(), Unavailable: s.unavailable, Errors: s.errors,
		RecoverySeconds: recovered.Seconds(), RecoveryBound: cfg.RecoveryBound.Seconds(),
		SettleSeconds: toPG.Seconds(), SettleBound: logSaleWriteWait.Seconds(),
		Achieved: float64(s.sends) / end.Sub(start).Seconds()}
	if waitErr != nil {
		res.SettleSeconds, res.SettleDetail = -1, waitErr.Error()
	}
	checks, line, err := s.judge(ctx, r, spec, created, struck)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sc.Name, err)
	}
	fmt.Fprintf(progressOf(cfg), "\n  %s: %d orders, %d sends in %.1f s (%.0f/s); %s; Postgres held every 201 %.2f s after the last answer\n  ",
		sc.Name, s.orders, s.sends, end.Sub(start).Seconds(), res.Achieved, line, toPG.Seconds())
	checks = append(checks, verify.Check{Name: checkRecovered, Pass: recovered <= cfg.RecoveryBound,
		Detail: fmt.Sprintf("the longest wait for a 201 after a fault ended: %.2f s (bound %s)", recovered.Seconds(), cfg.RecoveryBound)})
	res.Checks = append(checks, r.agreementChecks(ctx, time.Now().Add(cfg.SettleBound), spec.Code)...)
	res.Pass = verify.Passed(res.Checks)
	return res, nil
}

// progressOf is where a scenario's own lines go: cfg.Progress, or nowhere.
func progressOf(cfg Config) io.Writer {
	if cfg.Progress == nil {
		return io.Discard
	}
	return cfg.Progress
}

// judge reads the voucher back from Postgres, Redis and Kafka and checks the
// sale: the checks, and the counts in one line.
func (s *closedSale) judge(ctx context.Context, r *rig, spec verify.VoucherSpec, created map[string]bool, struck []string) ([]verify.Check, string, error) {
	d, err := r.bench.DBState(ctx, spec.Code)
	if err != nil {
		return nil, "", err
	}
	st, loaded, err := r.bench.RedisState(ctx, spec.Code)
	if err != nil || !loaded {
		return nil, "", fmt.Errorf("read %s in Redis (loaded %v): %w", spec.Code, loaded, err)
	}
	logged, err := r.st.KafkaRecords(stack.AdmissionsTopic)
	if err != nil {
		return nil, "", err
	}
	dead, err := r.st.KafkaRecords(stack.DeadLetterTopic)
	if err != nil {
		return nil, "", err
	}
	failed, err := failedAdmissions(ctx, r.bench)
	if err != nil {
		return nil, "", err
	}
	rows, taken := 0, spec.Stock-int(st.Remaining)
	for _, n := range d.ByStatus {
		rows += n
	}
	held := map[string]bool{}
	for _, o := range st.Orders {
		held[o.OrderID] = true
	}
	var odd []string // orders on which the three sides differ
	for id := range created {
		if _, ok := d.Active[id]; !ok || !held[id] {
			odd = append(odd, fmt.Sprintf("%s answered 201: row %v, held in Redis %v", id, ok, held[id]))
		}
	}
	for id := range d.Active {
		if !created[id] {
			odd = append(odd, id+" has a row and was never answered 201")
		}
	}
	line := fmt.Sprintf("%d orders answered 201, %s; Postgres: %d rows (%d active), used_count %d; Redis: %d uses taken, %d orders held; "+
		"%d records in the admissions log, %d dead-lettered, %d failed admissions; %d sent again after their answer, %d retries after a 503, 429 or no answer",
		len(created), s.refusalLine(), rows, len(d.Active), d.Used, taken, len(st.Orders), logged, dead, failed, s.again, s.retries)
	exact := len(odd) == 0 && rows == len(created) && len(d.Active) == len(created) && d.Used == len(created) &&
		taken == len(created) && len(st.Orders) == len(created)
	return []verify.Check{
		{Name: checkLogFaults, Pass: len(struck) == 2, Detail: strings.Join(append(struck, "(want the ledger killed and the broker restarted)"), "; ")},
		{Name: checkLogExact, Pass: exact, Detail: line + samples(firstOf(odd, 5))},
		{Name: checkLogSoldOut, Pass: len(created) == spec.Stock, Detail: fmt.Sprintf("%d of %d uses answered 201", len(created), spec.Stock)},
		{Name: checkLogKept201, Pass: len(s.broken) == 0, Detail: fmt.Sprintf("%d orders answered 201 and then otherwise when sent again%s", len(s.broken), samples(firstOf(s.broken, 5)))},
		{Name: checkLogAllAnswers, Pass: s.unanswered == 0, Detail: fmt.Sprintf("%d orders without a 201 or 409 after %s of retries", s.unanswered, logSaleOrderWait)},
		{Name: checkLogNoDead, Pass: dead == 0 && failed == 0, Detail: fmt.Sprintf("%d records in %s, %d failed admissions at the ledger", dead, stack.DeadLetterTopic, failed)},
		{Name: checkLogPerUser, Pass: d.MaxUsage <= logSalePerUser, Detail: fmt.Sprintf("the most uses of one customer: %d (limit %d)", d.MaxUsage, logSalePerUser)},
	}, line, nil
}

// firstOf is s's first n (a check's samples).
func firstOf(s []string, n int) []string { return s[:min(n, len(s))] }

// failedAdmissions counts the ledger's failed admissions, closed ones too, up
// to the route's largest page (500; its default, 100, counted 100 of a run's
// 2,246 dead letters).
func failedAdmissions(ctx context.Context, b *verify.Bench) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.LedgerURL+api.RouteFailedAdmissions+"?all=true&limit=500", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+b.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("list failed admissions: %w", err)
	}
	defer resp.Body.Close()
	var page api.FailedAdmissionPage
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("list failed admissions: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		return 0, fmt.Errorf("list failed admissions: %w", err)
	}
	return len(page.Admissions), nil
}

// strike kills the (first) ledger once share logSaleKillAt of stock was
// answered 201 and restarts it after down, then restarts the broker (down for
// brokerDown) at logSaleBrokerAt; it returns a line per fault that struck,
// and sets recovered to the longest wait for a 201 after a fault ended.
func (s *closedSale) strike(ctx context.Context, r *rig, stock int, down, brokerDown time.Duration, recovered *time.Duration) []string {
	var struck []string
	at := int(logSaleKillAt * float64(stock))
	if !s.waitCreated(ctx, at) {
		return struck
	}
	start := time.Now()
	if err := r.st.Ledger.Kill(); err != nil {
		return append(struck, "kill the ledger: "+err.Error())
	}
	load.Sleep(ctx, down)
	if err := r.st.Ledger.Restart(); err != nil {
		return append(struck, "restart the ledger: "+err.Error())
	}
	n := s.createdCount()
	back := s.nextCreated(ctx, n)
	*recovered = back
	struck = append(struck, fmt.Sprintf("the ledger killed (-9) at %d of %d uses answered 201, serving again %.2f s later, the next 201 %.2f s after that",
		n, stock, time.Since(start).Seconds()-back.Seconds(), back.Seconds()))
	at = int(logSaleBrokerAt * float64(stock))
	if !s.waitCreated(ctx, at) {
		return struck
	}
	n = s.createdCount()
	gone, err := r.st.RestartKafka(brokerDown)
	if err != nil {
		return append(struck, err.Error())
	}
	back = s.nextCreated(ctx, s.createdCount())
	*recovered = max(*recovered, back)
	return append(struck, fmt.Sprintf("the broker stopped at %d of %d uses answered 201 and started again from its files %.2f s later, the next 201 %.2f s after that",
		n, stock, gone.Seconds(), back.Seconds()))
}

// nextCreated waits for a 201 beyond the n answered and returns how long it
// took (as long as it waited when none came).
func (s *closedSale) nextCreated(ctx context.Context, n int) time.Duration {
	start := time.Now()
	s.waitCreated(ctx, n+1)
	return time.Since(start)
}

// closedSale is a sale by closed-loop clients: each sends one order at a
// time until its final answer (201 or 409), sending it again with the same
// orderId after a 503, a 429 (once the Retry-After it was given has passed)
// or no answer at all, as the README asks a client to.
type closedSale struct {
	url     string // the voucher's reserve route
	code    string
	clients int
	http    *http.Client
	over    chan struct{} // closed once every order was answered

	mu           sync.Mutex
	answer       map[string]string // orderId -> "201", or the code of its first 409
	n201         int
	broken       []string // orders answered 201 and then otherwise
	statuses     map[string]int
	errorSamples []string

	// orders sent, sends, sends again after an unfinal answer, orders sent
	// again after their final answer, 503s and 429s, transport errors,
	// orders never answered
	orders, sends, retries, again, unavailable, errors, unanswered int
}

func newClosedSale(entry, code string, clients int) *closedSale {
	return &closedSale{url: load.ReserveURL(entry, code), code: code, clients: clients,
		http:   &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}},
		over:   make(chan struct{}),
		answer: map[string]string{}, statuses: map[string]int{}}
}

// known waits until the proxy knows the voucher (a code outside its set is a
// 404 it answers itself): an order below the minimum is NOT_ELIGIBLE.
func (s *closedSale) known(ctx context.Context) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		status, _, _, err := s.post(ctx, 1, s.code+"-probe", 1)
		if err == nil && status != http.StatusNotFound {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the proxy still answers %s %d (%v) 5 s after its creation", s.code, status, err)
		}
		load.Sleep(ctx, 10*time.Millisecond)
	}
}

// run sends orders orders of each of customers customers through s.clients
// clients, and every fifth order once more after its answer.
func (s *closedSale) run(ctx context.Context, customers, orders int) {
	type order struct {
		customer int64
		id       string
		again    bool
	}
	queue := make(chan order, 1024)
	go func() {
		defer close(queue)
		for c, i := 1, 0; c <= customers; c++ {
			for o := range orders {
				select {
				case queue <- order{int64(c), fmt.Sprintf("%s-c%d-o%d", s.code, c, o), i%logSaleAgainEvery == 0}:
				case <-ctx.Done():
					return
				}
				i++
			}
		}
	}()
	var wg sync.WaitGroup
	for range s.clients {
		wg.Go(func() {
			for o := range queue {
				if s.send(ctx, o.customer, o.id, false) && o.again {
					s.send(ctx, o.customer, o.id, true)
				}
			}
		})
	}
	wg.Wait()
	close(s.over)
}

// send reserves one order until its final answer and records it; false when
// none came within logSaleOrderWait.
func (s *closedSale) send(ctx context.Context, customer int64, id string, again bool) bool {
	deadline := time.Now().Add(logSaleOrderWait)
	s.count(func() {
		if again {
			s.again++
		} else {
			s.orders++
		}
	})
	for ctx.Err() == nil {
		status, code, wait, err := s.post(ctx, customer, id, load.OrderAmount)
		got := ""
		switch {
		case status == http.StatusCreated:
			got = "201"
		case status == http.StatusConflict:
			got = code
		}
		s.record(id, status, got, err)
		if got != "" {
			return true
		}
		if time.Now().After(deadline) {
			s.count(func() { s.unanswered++ })
			return false
		}
		load.Sleep(ctx, wait)
	}
	return false
}

// record counts one answer to order id (got: its final answer, or "").
func (s *closedSale) record(id string, status int, got string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sends++
	key := strconv.Itoa(status)
	switch {
	case err != nil:
		key = "error"
		s.errors++
		if len(s.errorSamples) < 5 {
			s.errorSamples = append(s.errorSamples, err.Error())
		}
	case status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests:
		s.unavailable++
	}
	s.statuses[key]++
	if got == "" {
		s.retries++
		return
	}
	prev, ok := s.answer[id]
	switch {
	case ok && prev == "201" && got != "201":
		// A 201 is a promise: the order holds a use, and every send of it
		// again must be answered 201.
		s.broken = append(s.broken, fmt.Sprintf("%s: 201 then %s", id, got))
	case !ok || (prev != "201" && got == "201"):
		// A refusal is no promise (nothing is kept of it): a send of the
		// order again is decided anew, and may find a use given back since.
		s.answer[id] = got
		if got == "201" {
			s.n201++
		}
	}
}

func (s *closedSale) count(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
}

// post sends one reserve and returns its status, a 409's error code, how
// long to wait before sending it again (its Retry-After, at most 3 s; 50 ms
// without one), or the transport's error.
func (s *closedSale) post(ctx context.Context, customer int64, id string, amount int64) (int, string, time.Duration, error) {
	body := fmt.Sprintf(`{"customerId":%d,"orderId":%q,"orderAmount":%d}`, customer, id, amount)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, strings.NewReader(body))
	if err != nil {
		return 0, "", 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", id) // a resend of an orderId is the same order
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, "", 50 * time.Millisecond, err
	}
	defer resp.Body.Close()
	var e api.ErrorBody
	if resp.StatusCode == http.StatusConflict {
		_ = json.NewDecoder(resp.Body).Decode(&e)
	} else {
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	wait := 50 * time.Millisecond
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		wait = min(time.Duration(secs)*time.Second, 3*time.Second)
	}
	return resp.StatusCode, e.Error, wait, nil
}

// created is the orders answered 201.
func (s *closedSale) created() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]bool, s.n201)
	for id, a := range s.answer {
		if a == "201" {
			out[id] = true
		}
	}
	return out
}

func (s *closedSale) createdCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n201
}

// refused is how many orders were answered 409.
func (s *closedSale) refused() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.answer) - s.n201
}

// refusalLine is the orders answered 409, by error code.
func (s *closedSale) refusalLine() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := map[string]int{}
	for _, a := range s.answer {
		if a != "201" {
			n[a]++
		}
	}
	return fmt.Sprintf("409 %v", n)
}

// waitCreated waits until n orders were answered 201 (true), or the sale is
// over or ctx done (false).
func (s *closedSale) waitCreated(ctx context.Context, n int) bool {
	for s.createdCount() < n {
		select {
		case <-s.over:
			return false
		case <-ctx.Done():
			return false
		case <-time.After(2 * time.Millisecond):
		}
	}
	return true
}
