package systemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// voprRun is one round in progress: its plan, the stack, what every call was
// answered, and what the operator and the faults did that the checks need.
type voprRun struct {
	s      *voprStack
	r      *voprRound
	h      *voprHistory
	stats  *voprStats
	client *voprClient

	faults    atomic.Int64
	destroyed atomic.Bool // a fault deleted Redis keys in this round

	// A log round's (vopr_log_test.go): heldBefore says whether a row's use
	// was held by the moment a perUserLimit change can have committed (nil:
	// the row was created by then); moreChecks adds its checks to check's.
	heldBefore func(row voprRow, at time.Time) bool
	moreChecks func(ctx context.Context, db *voprDB) []voprProblem

	mu sync.Mutex
	// perUserChanged is, per voucher, the database's clock at a moment after
	// its last perUserLimit PATCH can have committed (see checkCustomers).
	perUserChanged map[string]time.Time
	perUserUnsure  map[string]bool // a perUserLimit PATCH went unanswered
}

// voprOp is one recorded call and its answer.
type voprOp struct {
	id         int
	actor      string // "d3" (driver 3), "operator", "fault"
	kind       string
	code       string
	order      string // "" for voucher-wide operations
	customer   int64
	detail     string // the PATCH body, the fault's length
	start, end time.Duration
	answer     voprAnswer
}

func (op voprOp) String() string {
	who := op.actor
	if op.customer != 0 {
		who += fmt.Sprintf(" c%d", op.customer)
	}
	target := op.code
	if op.order != "" {
		target += "/" + op.order
	}
	if op.detail != "" {
		target += " " + op.detail
	}
	return fmt.Sprintf("#%d [%7.1fms..%7.1fms] %-9s %-18s %s -> %s", op.id,
		float64(op.start.Microseconds())/1000, float64(op.end.Microseconds())/1000, who, op.kind, target, op.answer)
}

// voprHistory is every call of a round, in the order they returned.
type voprHistory struct {
	start time.Time
	mu    sync.Mutex
	ops   []voprOp
}

func newVOPRHistory() *voprHistory { return &voprHistory{start: time.Now()} }

func (h *voprHistory) now() time.Duration { return time.Since(h.start) }

func (h *voprHistory) add(op voprOp) {
	h.mu.Lock()
	defer h.mu.Unlock()
	op.id = len(h.ops) + 1
	h.ops = append(h.ops, op)
}

func (h *voprHistory) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

func (h *voprHistory) all() []voprOp {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]voprOp(nil), h.ops...)
}

// voprAnswer is what a call got. Status 0: no answer (the client hung up or
// gave up, or the connection failed); the call may or may not have acted.
type voprAnswer struct {
	status   int
	code     string // the error code
	resState string // the reservation's status in a 200 body
	note     string
	discount int64 // a reservation's body's (201, 200): the discount it promised
}

func (a voprAnswer) String() string {
	switch {
	case a.status == 0:
		return "? (" + a.note + ")"
	case a.code != "":
		return fmt.Sprintf("%d %s", a.status, a.code)
	case a.status == http.StatusCreated && a.discount != 0:
		return fmt.Sprintf("%d discount %d", a.status, a.discount)
	case a.resState != "":
		return fmt.Sprintf("%d %s", a.status, a.resState)
	}
	return fmt.Sprint(a.status)
}

// voprClient sends the calls. It has no timeout of its own: each call's
// context decides (a deadline, a hang-up, or the default voprCallTimeout).
type voprClient struct{ http *http.Client }

const voprCallTimeout = 5 * time.Second

func newVOPRClient() *voprClient {
	return &voprClient{http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
}

func (c *voprClient) do(ctx context.Context, method, url, token string, body any) voprAnswer {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return voprAnswer{note: err.Error()}
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return voprAnswer{note: err.Error()}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return voprAnswer{note: shortErr(err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return voprAnswer{note: shortErr(err)}
	}
	var b struct {
		Error          string `json:"error"`
		Status         string `json:"status"`
		DiscountAmount int64  `json:"discountAmount"`
	}
	_ = json.Unmarshal(raw, &b)
	a := voprAnswer{status: resp.StatusCode, code: b.Error, resState: b.Status, discount: b.DiscountAmount}
	if resp.StatusCode >= 500 {
		a.note = string(bytes.TrimSpace(raw))
	}
	return a
}

func shortErr(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}

// voprCallCtx is the context of one call by mode: "" the default timeout,
// "disconnect" a hang-up after d, "deadline" a client timeout of d.
func voprCallCtx(mode string, d time.Duration) (context.Context, context.CancelFunc) {
	switch mode {
	case "disconnect":
		ctx, cancel := context.WithCancel(context.Background())
		t := time.AfterFunc(d, cancel)
		return ctx, func() { t.Stop(); cancel() }
	case "deadline":
		return context.WithTimeout(context.Background(), d)
	}
	return context.WithTimeout(context.Background(), voprCallTimeout)
}

// voprMix is an operation and its weight among its mix's (relative).
type voprMix struct {
	kind   string
	weight int
}

func (m voprMix) weigh() int { return m.weight }

// voprDriverMix is the drivers' operations: "-disconnect" hangs up after a
// few milliseconds, "-deadline" gives the call a client timeout that short.
var voprDriverMix = []voprMix{
	{"reserve", 34}, {"reserve-disconnect", 7}, {"reserve-deadline", 6},
	{"confirm", 16}, {"confirm-deadline", 3}, {"release", 12}, {"release-deadline", 3},
	{"refund", 6}, {"get", 13},
}

func pickWeighted[T any](rng *rand.Rand, items []T, weight func(T) int) T {
	total := 0
	for _, it := range items {
		total += weight(it)
	}
	n := rng.IntN(total)
	for _, it := range items {
		if n -= weight(it); n < 0 {
			return it
		}
	}
	return items[len(items)-1]
}

// orderID is the round's order number i: its vouchers' codes are unique to
// the run, so the first one's prefix keeps orderIds apart across runs.
func (r *voprRound) orderID(i int) string { return fmt.Sprintf("%s-o%d", r.vouchers[0].code, i) }

// drive is one customer-side driver: opsEach operations, all chosen from the
// seed alone (never from answers), so a seed replays the same choices.
func (run *voprRun) drive(d int) {
	r := run.r
	rng := rand.New(rand.NewPCG(r.seed, uint64(1+d)))
	pace := 12_000 // microseconds at most between two operations
	if r.log {
		pace = 40_000 // a log round's faults last seconds: its drivers outlast a few
	}
	for range r.opsEach {
		time.Sleep(time.Duration(rng.IntN(pace)) * time.Microsecond)
		i := rng.IntN(r.orders)
		v := r.vouchers[i%len(r.vouchers)]
		if rng.IntN(10) == 0 { // an orderId sent to another voucher than its own
			v = r.vouchers[rng.IntN(len(r.vouchers))]
		}
		c := int64(i%r.customers + 1)
		if rng.IntN(10) == 0 { // another customer tries the order
			c = int64(rng.IntN(r.customers) + 1)
		}
		amount := int64(5_000)
		if rng.IntN(20) == 0 {
			amount = 500 // below minOrderAmount
		}
		if r.log && rng.IntN(8) == 0 {
			amount = 7_000 // a retry of the order with another amount (another discount)
		}
		kind := pickWeighted(rng, voprDriverMix, voprMix.weigh).kind
		wait := time.Duration(1+rng.IntN(25)) * time.Millisecond
		run.customerOp(fmt.Sprintf("d%d", d), kind, v.code, r.orderID(i), c, amount, wait)
	}
}

// customerOp sends one driver operation through the proxy and records it.
func (run *voprRun) customerOp(actor, kind, code, order string, customer, amount int64, wait time.Duration) {
	base, mode, _ := strings.Cut(kind, "-")
	ctx, cancel := voprCallCtx(mode, wait)
	defer cancel()
	path := run.s.ProxyURL + "/vouchers/" + code + "/reservations"
	op := voprOp{actor: actor, kind: kind, code: code, order: order, start: run.h.now()}
	if mode != "" {
		op.detail = mode + " " + wait.String()
	}
	switch base {
	case "reserve":
		op.customer = customer
		if amount != 5_000 {
			op.detail = strings.TrimSpace(op.detail + fmt.Sprintf(" amount %d", amount))
		}
		op.answer = run.client.do(ctx, http.MethodPost, path, "",
			map[string]any{"customerId": customer, "orderId": order, "orderAmount": amount})
	case "confirm", "refund":
		op.answer = run.client.do(ctx, http.MethodPost, path+"/"+order+"/"+base, "", nil)
	case "release":
		op.answer = run.client.do(ctx, http.MethodDelete, path+"/"+order, "", nil)
	case "get":
		op.answer = run.client.do(ctx, http.MethodGet, path+"/"+order, "", nil)
	}
	op.end = run.h.now()
	run.h.add(op)
	run.stats.op(kind, op.answer.status)
}

// The operator's operations on a voucher, through the ledger's admin routes.
var voprOperatorMix = []voprMix{
	{"patch-total", 25}, {"patch-window", 12}, {"patch-perUser", 20}, {"pause", 8}, {"resume", 20},
}

// operate is the operator: admin changes to random vouchers of the round
// until stop, chosen from the seed.
func (run *voprRun) operate(stop <-chan struct{}) {
	r := run.r
	rng := rand.New(rand.NewPCG(r.seed, 1000))
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(30+rng.IntN(120)) * time.Millisecond):
		}
		v := r.vouchers[rng.IntN(len(r.vouchers))]
		kind := pickWeighted(rng, voprOperatorMix, voprMix.weigh).kind
		var body map[string]any
		switch kind {
		case "patch-total":
			body = map[string]any{"totalLimit": rng.IntN(v.maxLimit + 1)}
		case "patch-perUser":
			body = map[string]any{"perUserLimit": 1 + rng.IntN(3)}
		case "patch-window":
			now := time.Now()
			from, to := -time.Hour, time.Hour // open
			switch p := rng.IntN(100); {
			case p < 15:
				from, to = time.Hour, 2*time.Hour // not started
			case p < 30:
				from, to = -2*time.Hour, -time.Minute // ended
			}
			body = map[string]any{"startsAt": now.Add(from).UTC().Format(time.RFC3339Nano),
				"endsAt": now.Add(to).UTC().Format(time.RFC3339Nano)}
		}
		run.adminOp("operator", kind, v.code, body)
	}
}

// adminOp sends one admin call to the ledger and records it.
func (run *voprRun) adminOp(actor, kind, code string, body map[string]any) {
	ctx, cancel := voprCallCtx("", 0)
	defer cancel()
	url := run.s.LedgerURL + "/admin/vouchers/" + code
	op := voprOp{actor: actor, kind: kind, code: code, start: run.h.now()}
	if body != nil {
		raw, _ := json.Marshal(body)
		op.detail = string(raw)
		op.answer = run.client.do(ctx, http.MethodPatch, url, ledgerToken, body)
	} else {
		op.answer = run.client.do(ctx, http.MethodPost, url+"/"+kind, ledgerToken, nil)
	}
	op.end = run.h.now()
	if kind == "patch-perUser" {
		run.notePerUserChange(code, op.answer)
	}
	run.h.add(op)
	run.stats.op(kind, op.answer.status)
}

// notePerUserChange records when a perUserLimit PATCH can last have
// committed: by the database's clock read after its answer, or, unanswered
// (it may still commit), at the end of the round.
func (run *voprRun) notePerUserChange(code string, a voprAnswer) {
	if a.status >= 400 && a.status < 500 {
		return // refused: nothing changed
	}
	run.mu.Lock()
	defer run.mu.Unlock()
	if run.perUserChanged == nil {
		run.perUserChanged, run.perUserUnsure = map[string]time.Time{}, map[string]bool{}
	}
	if a.status != 200 {
		run.perUserUnsure[code] = true
		return
	}
	var now time.Time
	ctx, cancel := context.WithTimeout(context.Background(), voprCallTimeout)
	defer cancel()
	if err := run.s.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		run.perUserUnsure[code] = true
		return
	}
	run.perUserChanged[code] = now
}

// settleRound ends a round once its drivers, operator and faults stopped: a
// round that deleted Redis data warms its flash vouchers up again (the
// warmup after the data loss, which the checks then judge), and an
// unanswered perUserLimit PATCH is dated now.
func (run *voprRun) settleRound(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), voprCallTimeout)
	defer cancel()
	run.mu.Lock()
	for code := range run.perUserUnsure {
		var now time.Time
		if err := run.s.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err == nil {
			run.perUserChanged[code] = now
		}
	}
	run.mu.Unlock()
	if !run.destroyed.Load() {
		return
	}
	for _, v := range run.r.vouchers {
		if v.flash {
			run.warmup(v.code, "settle")
		}
	}
}

// warmup asks the ledger to load code into Redis, retrying a refusal by a
// fault for a few seconds, and records it.
func (run *voprRun) warmup(code, actor string) {
	deadline := time.Now().Add(3 * time.Second)
	for {
		ctx, cancel := voprCallCtx("", 0)
		op := voprOp{actor: actor, kind: "warmup", code: code, start: run.h.now()}
		op.answer = run.client.do(ctx, http.MethodPost, run.s.LedgerURL+"/admin/vouchers/"+code+"/warmup", ledgerToken, nil)
		cancel()
		op.end = run.h.now()
		run.h.add(op)
		run.stats.op("warmup", op.answer.status)
		if op.answer.status == 200 || time.Now().After(deadline) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
