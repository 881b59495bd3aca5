package main

// Linearizability: concurrent clients drive reserve / confirm / release / get
// through the proxy (a real ledger process, real Redis and Postgres), every
// call and its answer is recorded with its start and end time, and porcupine
// checks that some sequential order of the calls, respecting real time, is
// what the sequential model of one voucher (linearizabilityModel) would
// answer. Faults (Redis and the ledger killed mid-run) make some answers
// indeterminate; the check still has to pass. Once the run is over and quiet,
// every order still holding a use is retried by its customer and must get its
// 201, and the database and Redis are compared.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/devstack"
	"github.com/flashgate/flashgate/shared/devstack/devstacktest"
	"github.com/flashgate/flashgate/shared/voucher"
)

// ---------------------------------------------------------------------------
// The sequential model of one voucher.

// linMaxOrders bounds the orderIds of one history (the state is two arrays).
const linMaxOrders = 32

type linKind uint8

const (
	linReserve linKind = iota + 1
	linConfirm
	linRelease
	linGet
)

var linKindNames = [...]string{linReserve: "reserve", linConfirm: "confirm", linRelease: "release", linGet: "get"}

// linOp is an operation's input. Customer matters for reserve only.
type linOp struct {
	Kind     linKind
	Customer uint8 // 1-based customer id
	Order    uint8 // index of the orderId
	// Contested marks a reserve that overlapped in time with another
	// customer's reserve of the same orderId (see markContested).
	Contested bool
	// Call and Return are the operation's own times (nanoseconds on the
	// history's clock), for the sold-out flag's time window.
	Call, Return int64
}

// linResult is an operation's output. Status 0 is an indeterminate outcome
// (transport error, timeout, 5xx): the call may or may not have taken effect.
type linResult struct {
	Status   int
	Code     string // the error code; with 200 from confirm or get, the reservation's status
	Customer uint8  // get: the reservation's customer
}

func (r linResult) indeterminate() bool { return r.Status == 0 }

// Order states in the model.
const (
	ordNone uint8 = iota
	ordReserved
	ordConfirmed
	ordReleased
)

var ordNames = [...]string{ordNone: "-", ordReserved: "RESERVED", ordConfirmed: "CONFIRMED", ordReleased: "RELEASED"}

// linState is the voucher as the sequential model sees it: each orderId's
// status and customer, and when it last became active (the Return time of the
// call that made it so: the latest its admission in Redis can have been).
// used and the per-customer counts are derived from it. It is a comparable
// value, so == is state equality.
type linState struct {
	status   [linMaxOrders]uint8
	owner    [linMaxOrders]uint8
	activeAt [linMaxOrders]int64
}

func (s linState) active(o uint8) bool {
	return s.status[o] == ordReserved || s.status[o] == ordConfirmed
}

func (s linState) used() int {
	n := 0
	for o := range s.status {
		if s.active(uint8(o)) {
			n++
		}
	}
	return n
}

func (s linState) activeOf(c uint8) int {
	n := 0
	for o := range s.status {
		if s.owner[o] == c && s.active(uint8(o)) {
			n++
		}
	}
	return n
}

// voucherSpec is the voucher a history runs against.
type voucherSpec struct {
	stock, perUser int
	// exact: every refusal must be justified by the state, as for a standard
	// voucher, whose reserve is one guarded transaction in the database.
	// Without it (flash vouchers, admitted by Redis first) the refusals the gate
	// gives are allowed whatever the counts say, within the limits that
	// linearizabilityModel describes.
	exact bool
	// flagWindow is how long after an order became active the proxy's
	// sold-out flag may still refuse its retries (see linearizabilityModel).
	flagWindow time.Duration
}

// linearizabilityModel is the sequential specification of one voucher with
// spec.stock uses and spec.perUser uses per customer.
//
// State: orderId -> {customer, RESERVED | CONFIRMED | RELEASED}; used is the
// number of active (RESERVED or CONFIRMED) orders, active(c) the active orders
// of customer c. "fits(c)" below is used < stock && active(c) < perUser.
//
//	reserve(c, o)  new o:                 201 iff fits(c): o RESERVED for c
//	               o active for c:        201, no change (a retry)
//	               o of another customer: 409 ORDER_CONFLICT; flash: also for a
//	               new or released o when another customer's reserve of o was
//	               in flight at the time (Contested, see below), never for an
//	               o active for c
//	               o RELEASED for c:      409 RESERVATION_RELEASED
//	               409 OUT_OF_STOCK / ALREADY_USED change nothing. Exact: only
//	               for a new o, OUT_OF_STOCK iff used = stock and active(c) <
//	               perUser, ALREADY_USED iff active(c) = perUser. Flash: in any
//	               state except when o is active for c; then only OUT_OF_STOCK,
//	               and only within flagWindow of o becoming active (see below).
//	confirm(o)     RESERVED: 200 CONFIRMED. CONFIRMED: 200, no change.
//	               RELEASED: 200 CONFIRMED iff fits(owner) (takes a use again),
//	               409 RESERVATION_EXPIRED otherwise; flash: also when it fits
//	               (Redis's counts lag the database's).
//	               unknown: 404 RESERVATION_NOT_FOUND.
//	release(o)     RESERVED: 204, RELEASED (the use is back). RELEASED: 204.
//	               CONFIRMED: 409 ALREADY_CONFIRMED. unknown: 404.
//	get(o)         200 {status, customerId}; 404 if unknown.
//
// Why refusals are free on a flash voucher: the design accepts undersell for a
// while. The proxy's sold-out flag answers OUT_OF_STOCK for up to SOLDOUT_TTL
// after stock came back through another path, and after a release Redis's
// counters catch up a moment after the database's; a reserve that Redis admits
// but the ledger refuses holds a Redis use for a moment. A released orderId is
// not in Redis any more, so its retry is judged as a new order there (and may
// get OUT_OF_STOCK / ALREADY_USED instead of RESERVATION_RELEASED).
//
// The sold-out flag and a retry of an order that holds a use (flagged() in
// proxy/admit.go): the flag holds a snapshot of the orders Redis held at a
// moment it had no use left, and for SOLDOUT_TTL answers OUT_OF_STOCK to every
// order not in it, retries included. Redis admits after the snapshot only with
// a use given back after it; a release through this proxy drops the flag
// (Unflag), but a use can also come back without passing here (the ledger
// giving back a refused write's or a late confirm's admission, another proxy,
// the sweeper, or a release whose Unflag has not run yet), and the ledger's
// late-confirm admission is not behind the flag at all. So an order admitted
// after the snapshot can be refused until the flag expires, and that is the
// rule: OUT_OF_STOCK to reserve(c, o) with o active for c is allowed only if
// the call started less than flagWindow (SOLDOUT_TTL plus the Redis timeout,
// the longest a snapshot can be older than its flag) after the call that last
// made o active returned. Anything else (ALREADY_USED, or OUT_OF_STOCK later)
// means Redis lost an order the database holds: a bug.
//
// Why ORDER_CONFLICT needs Contested: the gate records an orderId for its
// customer when it admits it, before the ledger has written the row, and the
// proxy answers another customer's reserve of that orderId with
// ORDER_CONFLICT from Redis alone. Until the write commits, get / confirm /
// release (answered from the database) still say 404, and a write the
// database refuses (c's order released, say) leaves no row at all. So a
// conflict is justified by an order the model holds for another customer, or
// by another customer's claim in flight, which only the history can show: an
// ORDER_CONFLICT answer without either is a bug.
//
// Indeterminate outcomes: the call may have taken effect (as its success
// would have) or not; the nondeterministic step returns both states.
func linearizabilityModel(spec voucherSpec) porcupine.NondeterministicModel {
	return porcupine.NondeterministicModel{
		Init: func() []any { return []any{linState{}} },
		Step: func(state, input, output any) []any {
			return spec.step(state.(linState), input.(linOp), output.(linResult))
		},
		Equal: func(a, b any) bool { return a.(linState) == b.(linState) },
		Hash: func(state any) uint64 {
			s := state.(linState)
			h := fnv.New64a()
			h.Write(s.status[:])
			h.Write(s.owner[:])
			var buf [8]byte
			for _, at := range s.activeAt {
				binary.LittleEndian.PutUint64(buf[:], uint64(at))
				h.Write(buf[:])
			}
			return h.Sum64()
		},
		DescribeOperation: func(input, output any) string {
			return describeLinOp(input.(linOp), output.(linResult))
		},
		DescribeState: func(state any) string { return describeLinState(state.(linState)) },
	}
}

func (spec voucherSpec) step(s linState, op linOp, r linResult) []any {
	if !r.indeterminate() {
		if next, ok := spec.apply(s, op, r); ok {
			return []any{next}
		}
		return nil
	}
	next := []any{s} // it did not happen, or happened without changing anything
	var success linResult
	switch op.Kind {
	case linReserve:
		success = linResult{Status: http.StatusCreated}
	case linConfirm:
		success = linResult{Status: http.StatusOK, Code: string(voucher.Confirmed)}
	case linRelease:
		success = linResult{Status: http.StatusNoContent}
	default:
		return next
	}
	if n, ok := spec.apply(s, op, success); ok && n != s {
		next = append(next, n)
	}
	return next
}

// apply returns the state after op answered r, and whether the model allows r.
func (spec voucherSpec) apply(s linState, op linOp, r linResult) (linState, bool) {
	o := op.Order
	st, owner := s.status[o], s.owner[o]
	fits := func(c uint8) bool { return s.used() < spec.stock && s.activeOf(c) < spec.perUser }
	switch op.Kind {
	case linReserve:
		c := op.Customer
		switch {
		case r.Status == http.StatusCreated:
			if st == ordNone && fits(c) {
				s.status[o], s.owner[o], s.activeAt[o] = ordReserved, c, op.Return
				return s, true
			}
			return s, s.active(o) && owner == c
		case r.Status == http.StatusConflict && (r.Code == voucher.CodeOutOfStock || r.Code == voucher.CodeAlreadyUsed):
			if s.active(o) && owner == c { // a retry of an order that holds a use
				return s, !spec.exact && spec.flagWindow > 0 && r.Code == voucher.CodeOutOfStock &&
					op.Call < s.activeAt[o]+spec.flagWindow.Nanoseconds()
			}
			if !spec.exact {
				return s, true
			}
			if st != ordNone {
				return s, false
			}
			if r.Code == voucher.CodeAlreadyUsed {
				return s, s.activeOf(c) >= spec.perUser
			}
			return s, s.activeOf(c) < spec.perUser && s.used() >= spec.stock
		case r.Status == http.StatusConflict && r.Code == voucher.CodeOrderConflict:
			if op.Contested && !spec.exact {
				return s, !(s.active(o) && owner == c)
			}
			return s, st != ordNone && owner != c
		case r.Status == http.StatusConflict && r.Code == voucher.CodeReservationReleased:
			return s, st == ordReleased && owner == c
		}
	case linConfirm:
		switch {
		case r.Status == http.StatusNotFound && r.Code == voucher.CodeReservationNotFound:
			return s, st == ordNone
		case r.Status == http.StatusOK && r.Code == string(voucher.Confirmed):
			switch {
			case st == ordReserved:
				s.status[o] = ordConfirmed
				return s, true
			case st == ordConfirmed:
				return s, true
			case st == ordReleased && fits(owner):
				s.status[o], s.activeAt[o] = ordConfirmed, op.Return
				return s, true
			}
		case r.Status == http.StatusConflict && r.Code == voucher.CodeReservationExpired:
			return s, st == ordReleased && (!spec.exact || !fits(owner))
		}
	case linRelease:
		switch {
		case r.Status == http.StatusNotFound && r.Code == voucher.CodeReservationNotFound:
			return s, st == ordNone
		case r.Status == http.StatusNoContent:
			if st == ordReserved {
				s.status[o] = ordReleased
				return s, true
			}
			return s, st == ordReleased
		case r.Status == http.StatusConflict && r.Code == voucher.CodeAlreadyConfirmed:
			return s, st == ordConfirmed
		}
	case linGet:
		switch {
		case r.Status == http.StatusNotFound && r.Code == voucher.CodeReservationNotFound:
			return s, st == ordNone
		case r.Status == http.StatusOK:
			return s, st != ordNone && ordNames[st] == r.Code && owner == r.Customer
		}
	}
	return s, false
}

func describeLinOp(op linOp, r linResult) string {
	var in string
	if op.Kind == linReserve {
		in = fmt.Sprintf("reserve(c%d, o%d)", op.Customer, op.Order)
		if op.Contested {
			in += "*"
		}
	} else {
		in = fmt.Sprintf("%s(o%d)", linKindNames[op.Kind], op.Order)
	}
	switch {
	case r.indeterminate():
		return in + " -> ?"
	case op.Kind == linGet && r.Status == http.StatusOK:
		return fmt.Sprintf("%s -> %s c%d", in, r.Code, r.Customer)
	case r.Code != "":
		return fmt.Sprintf("%s -> %d %s", in, r.Status, r.Code)
	}
	return fmt.Sprintf("%s -> %d", in, r.Status)
}

func describeLinState(s linState) string {
	var b strings.Builder
	fmt.Fprintf(&b, "used %d:", s.used())
	for o, st := range s.status {
		if st != ordNone {
			fmt.Fprintf(&b, " o%d=%s/c%d", o, ordNames[st][:3], s.owner[o])
		}
	}
	return b.String()
}

// ---------------------------------------------------------------------------
// Recording histories.

// linHistory collects operations from concurrent clients on one monotonic clock.
type linHistory struct {
	start time.Time

	mu  sync.Mutex
	ops []porcupine.Operation
}

func newLinHistory() *linHistory { return &linHistory{start: time.Now()} }

func (h *linHistory) now() int64 { return time.Since(h.start).Nanoseconds() }

// add records one call. note (the raw answer or the error) shows in the
// visualization.
func (h *linHistory) add(client int, op linOp, call int64, r linResult, ret int64, note string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{
		ClientId: client, Input: op, Call: call, Output: r, Return: ret, Metadata: note,
	})
}

// operations returns the history with every indeterminate call returning at
// the end of the history: it may take effect at any moment after its call.
func (h *linHistory) operations() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	ops := slices.Clone(h.ops)
	var end int64
	for _, op := range ops {
		end = max(end, op.Call, op.Return)
	}
	for i := range ops {
		if ops[i].Output.(linResult).indeterminate() {
			ops[i].Return = end + 1
		}
	}
	stampTimes(ops)
	markContested(ops)
	return ops
}

// stampTimes copies each operation's times into its input for the model.
func stampTimes(ops []porcupine.Operation) {
	for i := range ops {
		in := ops[i].Input.(linOp)
		in.Call, in.Return = ops[i].Call, ops[i].Return
		ops[i].Input = in
	}
}

// markContested sets Contested on every reserve that overlapped in time with a
// reserve of the same orderId by another customer (an indeterminate one
// overlaps everything after its call): the gate may have held the orderId for
// that customer while this one asked.
func markContested(ops []porcupine.Operation) {
	for i := range ops {
		a := ops[i].Input.(linOp)
		if a.Kind != linReserve {
			continue
		}
		for _, other := range ops {
			b := other.Input.(linOp)
			if b.Kind == linReserve && b.Order == a.Order && b.Customer != a.Customer &&
				other.Call <= ops[i].Return && other.Return >= ops[i].Call {
				a.Contested = true
				ops[i].Input = a
				break
			}
		}
	}
}

func countIndeterminate(ops []porcupine.Operation) int {
	n := 0
	for _, op := range ops {
		if op.Output.(linResult).indeterminate() {
			n++
		}
	}
	return n
}

// linClient sends the four calls to the proxy and turns the answers into
// linResults; it never fails the test, since under faults errors are expected.
type linClient struct {
	http  *http.Client
	base  string // proxy URL
	code  string
	order func(uint8) string
}

func (c linClient) do(op linOp) (linResult, string) {
	path := c.base + "/vouchers/" + c.code + "/reservations"
	var method string
	var body []byte
	switch op.Kind {
	case linReserve:
		method = http.MethodPost
		body, _ = json.Marshal(map[string]any{
			"customerId": op.Customer, "orderId": c.order(op.Order), "orderAmount": 5_000,
		})
	case linConfirm:
		method, path = http.MethodPost, path+"/"+c.order(op.Order)+"/confirm"
	case linRelease:
		method, path = http.MethodDelete, path+"/"+c.order(op.Order)
	case linGet:
		method, path = http.MethodGet, path+"/"+c.order(op.Order)
	}
	req, err := http.NewRequest(method, path, bytes.NewReader(body))
	if err != nil {
		return linResult{}, err.Error()
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return linResult{}, err.Error()
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	note := fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(raw))
	if err != nil || resp.StatusCode >= 500 {
		return linResult{}, note
	}
	var b struct {
		Error, Status string
		CustomerID    int64
	}
	_ = json.Unmarshal(raw, &b)
	r := linResult{Status: resp.StatusCode, Code: b.Error}
	if resp.StatusCode == http.StatusOK {
		r.Code, r.Customer = b.Status, uint8(b.CustomerID)
	}
	return r, note
}

// linWorkload is what the clients of one history do. Orders are picked from a
// window of orderIds that slides over orders as the run goes, so that calls
// collide (retries of one orderId, one orderId from two customers, several
// orders per customer) while late orders still find stock changing hands.
// The call is picked from what the last answer about the order said, so that
// reserved orders get released or confirmed and released ones confirmed late.
type linWorkload struct {
	seed      uint64
	clients   int
	customers int
	orders    int // orderIds over the whole run (<= linMaxOrders)
	window    int // orderIds in play at once
	ops       int // calls to record in the concurrent phase, retries included
	think     time.Duration
}

// linHints is the clients' shared, approximate view of each order: the status
// the last answer about it implied, or hintRefused after a refusal.
type linHints struct {
	mu     sync.Mutex
	status [linMaxOrders]uint8
}

// hintRefused: the last reserve of a new order was refused.
const hintRefused = ordReleased + 1

func (h *linHints) get(o uint8) uint8 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.status[o]
}

func (h *linHints) learn(op linOp, r linResult) {
	var st uint8
	switch {
	case op.Kind == linReserve && r.Status == http.StatusCreated:
		st = ordReserved
	case r.Code == voucher.CodeReservationReleased || op.Kind == linRelease && r.Status == http.StatusNoContent:
		st = ordReleased
	case r.Code == voucher.CodeAlreadyConfirmed || r.Code == string(voucher.Confirmed):
		st = ordConfirmed
	case r.Code == string(voucher.Reserved):
		st = ordReserved
	case r.Code == string(voucher.Released):
		st = ordReleased
	case r.Code == voucher.CodeOutOfStock || r.Code == voucher.CodeAlreadyUsed:
		st = hintRefused
	default:
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	old := h.status[op.Order]
	if (old == ordConfirmed || old == ordReleased) && (st == ordReserved || st == hintRefused) {
		return // not news: a retry's answer
	}
	h.status[op.Order] = st
}

// linMix is, for unpaid and paid orders and per hint, the percentages of
// reserve, confirm and release; the rest are gets. Only every third order is
// ever paid (confirmed), since a confirmed order holds its use for good and
// stock must keep changing hands until the end of the run.
var linMix = [2][hintRefused + 1][3]int{
	{ // unpaid
		ordNone:     {80, 0, 8},
		ordReserved: {20, 0, 60},
		ordReleased: {35, 0, 35},
		hintRefused: {60, 0, 15},
	},
	{ // paid
		ordNone:      {75, 8, 7},
		ordReserved:  {20, 30, 30},
		ordConfirmed: {30, 20, 20},
		ordReleased:  {25, 45, 15},
		hintRefused:  {55, 15, 10},
	},
}

func (w linWorkload) next(rng *rand.Rand, hints *linHints, done int) linOp {
	base := 0
	if slide := w.orders - w.window; slide > 0 {
		base = min(slide, done*(slide+1)/w.ops)
	}
	o := base + rng.IntN(w.window)
	c := o%w.customers + 1 // each order has a home customer ...
	if rng.IntN(10) == 0 {
		c = rng.IntN(w.customers) + 1 // ... and sometimes another one tries it
	}
	op := linOp{Customer: uint8(c), Order: uint8(o)}
	paid := 0
	if o%3 == 2 {
		paid = 1
	}
	mix := linMix[paid][hints.get(uint8(o))]
	switch p := rng.IntN(100); {
	case p < mix[0]:
		op.Kind = linReserve
	case p < mix[0]+mix[1]:
		op.Kind = linConfirm
	case p < mix[0]+mix[1]+mix[2]:
		op.Kind = linRelease
	default:
		op.Kind = linGet
	}
	return op
}

// Bounds of a run with faults (see runLinearizability).
const (
	linMaxPending  = 60
	linAfterFaults = 60
)

// linRun is one recorded run.
type linRun struct {
	h         *linHistory
	oversells []string            // DB states seen during the run that break the limits
	final     map[uint8]linResult // the final reads
	client    linClient           // for the final retries
	retries   []linRetry          // the final retries of active orders
}

// runLinearizability runs w's clients against code through s's proxy until w.ops
// calls are recorded and faults (may be nil) returned, then reads every order
// once more. faults gets a function that waits until n calls are recorded.
// An indeterminate call is retried with the same input a few times (each try
// is its own operation), then the client moves on.
//
// Every indeterminate call stays open to the end of the history and widens
// porcupine's search, so while linMaxPending of them are recorded the clients
// wait for the faults to be over instead of piling up more; and they run at
// least linAfterFaults calls once the faults are over.
func runLinearizability(t *testing.T, s *stack, code string, spec voucherSpec, flash bool, w linWorkload,
	faults func(waitOps func(n int), now func() time.Duration)) *linRun {
	t.Helper()
	require.LessOrEqual(t, w.orders, linMaxOrders)
	run := &linRun{h: newLinHistory()}
	h := run.h
	hc := &http.Client{
		Timeout:   3 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64},
	}
	cl := linClient{http: hc, base: s.ProxyURL, code: code,
		order: func(o uint8) string { return fmt.Sprintf("%s-o%d", code, o) }}

	var recorded, pending atomic.Int64
	var hints linHints
	target := atomic.Int64{} // calls to record; raised when the faults are over
	target.Store(int64(w.ops))
	faultsDone := make(chan struct{})
	if faults == nil {
		close(faultsDone)
	} else {
		go func() {
			defer close(faultsDone)
			faults(func(n int) {
				for recorded.Load() < int64(n) {
					time.Sleep(2 * time.Millisecond)
				}
			}, func() time.Duration { return time.Duration(h.now()) })
			target.Store(max(int64(w.ops), recorded.Load()+linAfterFaults))
		}()
	}
	over := func() bool {
		select {
		case <-faultsDone:
			return true
		default:
			return false
		}
	}
	more := func() bool { return recorded.Load() < target.Load() || !over() }
	pause := func() {
		for pending.Load() >= linMaxPending && !over() {
			time.Sleep(10 * time.Millisecond)
		}
	}

	// The database must never oversell, at any moment.
	ctx, stopWatch := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ctx.Err() == nil {
			var used, limit, active, maxPer int
			err := s.pool.QueryRow(ctx, `
				SELECT v.used_count, v.total_limit,
				       (SELECT count(*) FROM voucher_redemption WHERE voucher_code = v.code AND status IN ('RESERVED','CONFIRMED')),
				       coalesce((SELECT max(n) FROM (SELECT count(*) AS n FROM voucher_redemption
				                 WHERE voucher_code = v.code AND status IN ('RESERVED','CONFIRMED') GROUP BY customer_id) x), 0)
				FROM voucher v WHERE v.code = $1`, code).Scan(&used, &limit, &active, &maxPer)
			if err == nil && (used > limit || used != active || maxPer > spec.perUser) {
				run.oversells = append(run.oversells, fmt.Sprintf(
					"used_count %d, total_limit %d, active rows %d, most per customer %d", used, limit, active, maxPer))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()

	var wg sync.WaitGroup
	for i := range w.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(w.seed, uint64(i)))
			for more() {
				// A client thinks a little between calls: fewer calls overlap,
				// which keeps porcupine's search narrow, and the run lasts long
				// against the sold-out flag's window.
				time.Sleep(time.Duration(rng.IntN(int(w.think))))
				op := w.next(rng, &hints, int(recorded.Load()))
				backoff := 20 * time.Millisecond
				for attempt := 0; ; attempt++ {
					pause()
					call := h.now()
					r, note := cl.do(op)
					ret := h.now()
					hints.learn(op, r)
					if !(r.indeterminate() && op.Kind == linGet) { // an unanswered get tells nothing
						h.add(i, op, call, r, ret, note)
						recorded.Add(1)
						if r.indeterminate() {
							pending.Add(1)
						}
					}
					if !r.indeterminate() || attempt == 5 || !more() {
						break
					}
					time.Sleep(backoff + time.Duration(rng.IntN(int(backoff))))
					backoff = min(2*backoff, 200*time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	<-faultsDone
	stopWatch()
	<-watched

	// Every order once more, one at a time: the final state joins the history.
	time.Sleep(100 * time.Millisecond)
	final := map[uint8]linResult{}
	for o := range w.orders {
		op := linOp{Kind: linGet, Order: uint8(o)}
		if r, ok := sequentialCall(h, cl, w.clients, op); ok {
			final[op.Order] = r
		}
	}
	if flash {
		checkDivergence(t, s, code, faults == nil)
	}
	run.final, run.client = final, cl
	return run
}

// retryActive has every active order's customer retry it, once no sold-out
// flag can be alive. The system is quiet and the final reads pinned the state,
// so the answers are checked one by one (checkFinalRetries), not by porcupine,
// whose search would have to exhaust every order of the history before them to
// prove one wrong.
func (run *linRun) retryActive(spec voucherSpec) {
	time.Sleep(spec.flagWindow + 10*time.Millisecond)
	for o := range uint8(linMaxOrders) {
		if r, ok := run.final[o]; ok && (r.Code == string(voucher.Reserved) || r.Code == string(voucher.Confirmed)) {
			op := linOp{Kind: linReserve, Customer: r.Customer, Order: o}
			got, note := run.client.do(op)
			for attempt := 0; got.indeterminate() && attempt < 20; attempt++ {
				time.Sleep(50 * time.Millisecond) // a fault answer says nothing: ask again
				got, note = run.client.do(op)
			}
			run.retries = append(run.retries, linRetry{op: op, got: got, note: note})
		}
	}
}

// linRetry is a final retry of an active order and its answer.
type linRetry struct {
	op   linOp
	got  linResult
	note string
}

// checkFinalRetries asserts that every final retry of an order its customer
// holds got its 201, and shows the order's history when one did not.
func checkFinalRetries(t *testing.T, run *linRun) {
	t.Helper()
	refused := 0
	for _, r := range run.retries {
		if r.got.Status == http.StatusCreated {
			continue
		}
		refused++
		var b strings.Builder
		for _, op := range run.h.operations() {
			if op.Input.(linOp).Order == r.op.Order {
				b.WriteString("  " + formatLinOp(op) + "\n")
			}
		}
		t.Errorf("a retry of an order its customer holds, once the system was quiet: %s %s; the order's history:\n%s",
			describeLinOp(r.op, r.got), r.note, b.String())
	}
	t.Logf("final retries of active orders: %d, refused %d", len(run.retries), refused)
}

// sequentialCall makes one call after the concurrent phase, retrying until it
// gets an answer (the services may still be coming back), and records it.
func sequentialCall(h *linHistory, cl linClient, client int, op linOp) (linResult, bool) {
	for attempt := 0; attempt < 20; attempt++ {
		call := h.now()
		r, note := cl.do(op)
		if !r.indeterminate() {
			h.add(client, op, call, r, h.now(), note)
			return r, true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return linResult{}, false
}

// checkDivergence reports where Redis's orders differ from the database's
// active ones. Under faults a difference is expected until the reconciler runs,
// so it is only logged; without faults there must be none (strict), since an
// active order Redis lacks has its retries judged as a new order there.
func checkDivergence(t *testing.T, s *stack, code string, strict bool) {
	t.Helper()
	st, loaded, err := s.gate.State(context.Background(), code)
	if err != nil || !loaded {
		t.Logf("redis state of %s: loaded %v, %v", code, loaded, err)
		return
	}
	report := t.Logf
	if strict {
		report = t.Errorf
	}
	inRedis := map[string]bool{}
	for _, o := range st.Orders {
		inRedis[o.OrderID] = true
	}
	rows, err := s.pool.Query(context.Background(), `SELECT order_id FROM voucher_redemption
		WHERE voucher_code = $1 AND status IN ('RESERVED', 'CONFIRMED')`, code)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, id := range ids {
		if !inRedis[id] {
			report("DIVERGENCE: redis lacks %s, which holds a use in the database", id)
		}
		delete(inRedis, id)
	}
	for id := range inRedis {
		report("DIVERGENCE: redis holds %s, which holds no use in the database", id)
	}
	t.Logf("before the final retries: redis remaining %d, db remaining %d", st.Remaining, s.db(t, code).Remaining)
}

// ---------------------------------------------------------------------------
// Checking.

// linCheckTimeout bounds one porcupine check. A linearizable history here
// checks in milliseconds (the slowest seen took about 0.15 s); proving that
// one is not can take seconds when the violation lies deep in it, since the
// search must then exhaust every order of the calls before it.
const linCheckTimeout = 4 * time.Second

// nonAlnum matches what a test name must lose to become part of a file name.
var nonAlnum = regexp.MustCompile(`[^A-Za-z0-9]`)

// checkLinearizable checks ops against spec's model and returns porcupine's
// verdict. On a violation it writes porcupine's visualization and the history
// as text under os.TempDir(), logs their paths and an excerpt, and fails t.
func checkLinearizable(t *testing.T, spec voucherSpec, ops []porcupine.Operation) porcupine.CheckResult {
	t.Helper()
	nm := linearizabilityModel(spec)
	model := nm.ToModel()
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(model, ops, linCheckTimeout)
	took := time.Since(start)
	if res == porcupine.Unknown {
		// The search is deterministic for a given history: try once with more
		// time to tell a slow history from a hopeless one.
		t.Logf("check timed out after %v on %d operations; once more with %v", took, len(ops), 3*linCheckTimeout)
		start = time.Now()
		res, info = porcupine.CheckOperationsVerbose(model, ops, 3*linCheckTimeout)
		took = time.Since(start)
	}
	t.Logf("linearizability: %d operations (%d indeterminate), stock %d, per customer %d, exact %v: %s in %v",
		len(ops), countIndeterminate(ops), spec.stock, spec.perUser, spec.exact, res, took.Round(time.Microsecond))
	if res == porcupine.Ok {
		return res
	}
	name := nonAlnum.ReplaceAllString(t.Name(), "_")
	base := filepath.Join(os.TempDir(), fmt.Sprintf("flashgate-linearizability-%s-%d", name, time.Now().UnixNano()))
	if err := porcupine.VisualizePath(model, info, base+".html"); err != nil {
		t.Logf("visualize: %v", err)
	}
	if err := os.WriteFile(base+".txt", []byte(formatLinHistory(ops)), 0o644); err != nil {
		t.Logf("write history: %v", err)
	}
	verdict := "history is not linearizable"
	if res == porcupine.Unknown {
		// Twice out of time: a linearizable history of this size is found in
		// milliseconds, so this is almost surely a violation deep in the
		// history (or the history must shrink).
		verdict = fmt.Sprintf("porcupine could not decide within %v, twice", 3*linCheckTimeout)
	}
	t.Errorf("%s; visualization %s.html, history %s.txt\n%s", verdict, base, base, linExcerpt(ops, info))
	return res
}

func formatLinOp(op porcupine.Operation) string {
	note, _ := op.Metadata.(string)
	if len(note) > 120 {
		note = note[:120] + "..."
	}
	return fmt.Sprintf("client %d [%9.3fms .. %9.3fms] %-44s %s", op.ClientId,
		float64(op.Call)/1e6, float64(op.Return)/1e6,
		describeLinOp(op.Input.(linOp), op.Output.(linResult)), note)
}

func formatLinHistory(ops []porcupine.Operation) string {
	sorted := slices.Clone(ops)
	slices.SortStableFunc(sorted, func(a, b porcupine.Operation) int { return int(a.Call - b.Call) })
	var b strings.Builder
	for _, op := range sorted {
		b.WriteString(formatLinOp(op))
		b.WriteByte('\n')
	}
	return b.String()
}

// linExcerpt shows where the search got stuck: the end of the longest legal
// prefix, then the operations it could not place after it (the first to
// return, and everything that started before that one returned).
func linExcerpt(ops []porcupine.Operation, info porcupine.LinearizationInfo) string {
	type key struct {
		client        int
		call, return_ int64
	}
	var longest []porcupine.Operation
	for _, part := range info.PartialLinearizationsOperations() {
		for _, l := range part {
			if len(l) > len(longest) {
				longest = l
			}
		}
	}
	placed := map[key]bool{}
	for _, op := range longest {
		placed[key{op.ClientId, op.Call, op.Return}] = true
	}
	var rest []porcupine.Operation
	for _, op := range ops {
		if !placed[key{op.ClientId, op.Call, op.Return}] {
			rest = append(rest, op)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "longest linearizable prefix: %d of %d operations; its last ones:\n", len(longest), len(ops))
	for _, op := range longest[max(0, len(longest)-12):] {
		b.WriteString("  " + formatLinOp(op) + "\n")
	}
	if len(rest) == 0 {
		return b.String()
	}
	firstReturn := slices.MinFunc(rest, func(a, b porcupine.Operation) int { return int(a.Return - b.Return) }).Return
	var stuck []porcupine.Operation
	for _, op := range rest {
		if op.Call <= firstReturn {
			stuck = append(stuck, op)
		}
	}
	slices.SortFunc(stuck, func(a, b porcupine.Operation) int { return int(a.Call - b.Call) })
	b.WriteString("none of these fits next:\n")
	for _, op := range stuck[:min(len(stuck), 16)] {
		b.WriteString("  " + formatLinOp(op) + "\n")
	}
	return b.String()
}

// ---------------------------------------------------------------------------
// Final state.

// checkFinalState asserts the database's counters against its rows and the
// final reads, and, for a flash voucher, Redis against the database after a
// reconcile.
func checkFinalState(t *testing.T, s *stack, code string, spec voucherSpec, flash bool, run *linRun) {
	t.Helper()
	assert.Empty(t, run.oversells, "the database broke its limits during the run")
	d := s.db(t, code)
	assert.Equal(t, d.Active, d.Used, "used_count = active rows")
	assert.LessOrEqual(t, d.Used, spec.stock, "used_count <= total_limit")
	assert.Equal(t, spec.stock-d.Used, d.Remaining)
	assert.LessOrEqual(t, d.MaxPerCustomer, spec.perUser)

	last := map[uint8]linResult{}
	for _, op := range run.h.operations() {
		if in := op.Input.(linOp); in.Kind == linGet {
			last[in.Order] = op.Output.(linResult) // the final reads are the last reads
		}
	}
	finalActive := 0
	for _, r := range last {
		if r.Code == string(voucher.Reserved) || r.Code == string(voucher.Confirmed) {
			finalActive++
		}
	}
	assert.Equal(t, d.Active, finalActive, "active orders read at the end = active rows")
	t.Logf("final: used %d of %d, most per customer %d; answers: %s", d.Used, spec.stock, d.MaxPerCustomer,
		summarizeLinHistory(run.h.operations()))
	if !flash {
		return
	}
	rep := call(t, "POST", s.LedgerURL+"/admin/vouchers/"+code+"/reconcile", "test-token", nil)
	require.Equal(t, http.StatusOK, rep.Status, rep.Raw)
	t.Logf("reconcile: %s", rep.Raw)
	assert.EqualValues(t, d.Remaining, s.redisRemaining(t, code), "redis remaining = db remaining after reconcile")
}

// ---------------------------------------------------------------------------
// Tests.

// linSoldOutTTL is the proxy's SOLDOUT_TTL in these tests: short, so that the
// window in which the model lets the flag refuse a retry stays tight, while the
// flag still answers refusals during a sell-out.
const linSoldOutTTL = 50 * time.Millisecond

// linFlagWindow adds newStack's Redis timeout (REDIS_TIMEOUT): flagSoldOut
// reads its snapshot with one Redis call under that deadline before it sets
// the flag, so the snapshot can be that much older than the flag.
const linFlagWindow = linSoldOutTTL + 250*time.Millisecond

// Seeded runs against flash vouchers (through the Redis gate, coalescing on)
// and one against a standard voucher (the ledger's guarded transaction, so its
// refusals must be exact).
func TestLinearizabilityNoFaults(t *testing.T) {
	s := newStack(t, stackOptions{coalesce: true, soldOutTTL: linSoldOutTTL})
	w := linWorkload{clients: 6, customers: 4, orders: 24, window: 6, ops: 300, think: 4 * time.Millisecond}
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprintf("flash/seed=%d", seed), func(t *testing.T) {
			spec := voucherSpec{stock: 5, perUser: 2, flagWindow: linFlagWindow}
			code := newCode(t)
			s.createVoucher(t, code, spec.stock, spec.perUser, true)
			w := w
			w.seed = seed
			run := runLinearizability(t, s, code, spec, true, w, nil)
			ops := run.h.operations()
			checkLinearizable(t, spec, ops)
			run.retryActive(spec)
			checkFinalRetries(t, run)
			checkFinalState(t, s, code, spec, true, run)
		})
	}
	t.Run("standard", func(t *testing.T) {
		spec := voucherSpec{stock: 5, perUser: 2, exact: true}
		code := newCode(t)
		s.createVoucher(t, code, spec.stock, spec.perUser, false)
		w := w
		w.seed = 4
		run := runLinearizability(t, s, code, spec, false, w, nil)
		ops := run.h.operations()
		checkLinearizable(t, spec, ops)
		run.retryActive(spec)
		checkFinalRetries(t, run)
		checkFinalState(t, s, code, spec, false, run)
	})
}

// Redis killed (no persistence: it comes back empty) and the ledger killed,
// each restarted, while the clients run.
func TestLinearizabilityWithFaults(t *testing.T) {
	rs := devstacktest.NewRedis(t, devstack.RedisOptions{})
	s := newStack(t, stackOptions{coalesce: true, redisURL: rs.URL(), soldOutTTL: linSoldOutTTL,
		// Nothing is in flight when the test reconciles at the end, so an
		// admission without a row can be freed at once.
		ledgerEnv: []string{"HANGING_GRACE=1ms"}})
	spec := voucherSpec{stock: 5, perUser: 2, flagWindow: linFlagWindow}
	code := newCode(t)
	s.createVoucher(t, code, spec.stock, spec.perUser, true)
	w := linWorkload{seed: 5, clients: 6, customers: 4, orders: 24, window: 6, ops: 300, think: 4 * time.Millisecond}

	run := runLinearizability(t, s, code, spec, true, w, func(waitOps func(int), now func() time.Duration) {
		waitOps(60)
		t.Logf("%v: kill -9 redis", now())
		assert.NoError(t, rs.Kill())
		time.Sleep(100 * time.Millisecond)
		assert.NoError(t, rs.Restart())
		t.Logf("%v: redis restarted, empty", now())
		waitOps(160)
		t.Logf("%v: kill -9 ledger", now())
		assert.NoError(t, s.Ledger.Kill())
		time.Sleep(100 * time.Millisecond)
		assert.NoError(t, s.Ledger.Restart())
		t.Logf("%v: ledger restarted", now())
	})
	ops := run.h.operations()
	checkLinearizable(t, spec, ops)
	// Redis lost its data mid-run: an admission whose write committed after
	// the reload is missing there until the reconciler restores it (the
	// design's recovery), so the retries come after one reconcile.
	rep := call(t, "POST", s.LedgerURL+"/admin/vouchers/"+code+"/reconcile", "test-token", nil)
	require.Equal(t, http.StatusOK, rep.Status, rep.Raw)
	t.Logf("reconcile before the final retries: %s", rep.Raw)
	run.retryActive(spec)
	checkFinalRetries(t, run)
	checkFinalState(t, s, code, spec, true, run)
}

// The checker itself: hand-made histories that oversell or consume a use twice
// must be reported, and legal ones (indeterminate calls included) accepted.
func TestLinearizabilityCheckerCatchesBugs(t *testing.T) {
	type opSpec struct {
		client    int
		call, ret int64
		op        linOp
		r         linResult
	}
	build := func(specs []opSpec) []porcupine.Operation {
		var end int64
		for _, s := range specs {
			end = max(end, s.ret)
		}
		ops := make([]porcupine.Operation, len(specs))
		for i, s := range specs {
			if s.r.indeterminate() {
				s.ret = end + 1
			}
			ops[i] = porcupine.Operation{ClientId: s.client, Input: s.op, Call: s.call, Output: s.r, Return: s.ret}
		}
		stampTimes(ops)
		markContested(ops)
		return ops
	}
	res := func(kind linKind, c, o uint8) linOp { return linOp{Kind: kind, Customer: c, Order: o} }
	created := linResult{Status: 201}
	released := linResult{Status: 204}
	confirmed := linResult{Status: 200, Code: "CONFIRMED"}
	outOfStock := linResult{Status: 409, Code: voucher.CodeOutOfStock}
	unknown := linResult{}

	flash := voucherSpec{stock: 3, perUser: 1}
	standard := voucherSpec{stock: 3, perUser: 1, exact: true}

	// stock + 1 concurrent 201s for distinct orders, with an indeterminate
	// reserve that cannot make room.
	oversell := []opSpec{{client: 4, call: 0, op: res(linReserve, 5, 5), r: unknown}}
	for i := range flash.stock + 1 {
		oversell = append(oversell, opSpec{client: i, call: 10, ret: 20, op: res(linReserve, uint8(i+1), uint8(i)), r: created})
	}
	// A released order confirmed late although its use went to another
	// order: two orders on one use.
	one := voucherSpec{stock: 1, perUser: 1}
	lateDouble := []opSpec{
		{client: 0, call: 0, ret: 10, op: res(linReserve, 1, 0), r: created},
		{client: 0, call: 20, ret: 30, op: res(linRelease, 0, 0), r: released},
		{client: 1, call: 40, ret: 50, op: res(linReserve, 2, 1), r: created},
		{client: 0, call: 60, ret: 70, op: res(linConfirm, 0, 0), r: confirmed},
	}
	// A retry that consumed a second use: the next order is refused with a
	// use left, which only a standard voucher's exact model can tell.
	retryDouble := []opSpec{
		{client: 0, call: 0, ret: 10, op: res(linReserve, 1, 0), r: created},
		{client: 0, call: 20, ret: 30, op: res(linReserve, 1, 0), r: created},
		{client: 1, call: 40, ret: 50, op: res(linReserve, 2, 1), r: created},
		{client: 2, call: 60, ret: 70, op: res(linReserve, 3, 2), r: outOfStock},
	}
	// Legal: an indeterminate reserve that took effect, seen by a get, then
	// stock gone; and a retry refused after its order holds a use is not.
	legal := []opSpec{
		{client: 0, call: 0, op: res(linReserve, 1, 0), r: unknown},
		{client: 1, call: 10, ret: 20, op: res(linGet, 0, 0), r: linResult{Status: 200, Code: "RESERVED", Customer: 1}},
		{client: 1, call: 30, ret: 40, op: res(linReserve, 2, 1), r: outOfStock},
		{client: 1, call: 50, ret: 60, op: res(linConfirm, 0, 0), r: confirmed},
	}
	retryRefused := append(slices.Clone(legal[:2]),
		opSpec{client: 0, call: 30, ret: 40, op: res(linReserve, 1, 0), r: outOfStock})
	// The sold-out flag may refuse a retry of a held order shortly after the
	// order became active (here within 15 ns), not later.
	flagged := voucherSpec{stock: 1, perUser: 1, flagWindow: 15}
	flagRefusal := func(at int64) []opSpec {
		return []opSpec{
			{client: 0, call: 0, ret: 10, op: res(linReserve, 1, 0), r: created},
			{client: 1, call: at, ret: at + 2, op: res(linReserve, 1, 0), r: outOfStock},
		}
	}
	// ORDER_CONFLICT while another customer's claim is in flight, then the
	// order is not there (the claim's write was refused) ...
	conflict := linResult{Status: 409, Code: voucher.CodeOrderConflict}
	notFound := linResult{Status: 404, Code: voucher.CodeReservationNotFound}
	inFlight := []opSpec{
		{client: 0, call: 0, ret: 30, op: res(linReserve, 1, 0), r: outOfStock},
		{client: 1, call: 10, ret: 20, op: res(linReserve, 2, 0), r: conflict},
		{client: 1, call: 40, ret: 50, op: res(linGet, 0, 0), r: notFound},
	}
	// ... but not with nobody claiming it.
	noClaimer := []opSpec{
		{client: 1, call: 10, ret: 20, op: res(linReserve, 2, 0), r: conflict},
		{client: 1, call: 40, ret: 50, op: res(linGet, 0, 0), r: notFound},
	}

	for _, tc := range []struct {
		name string
		spec voucherSpec
		ops  []opSpec
		want porcupine.CheckResult
	}{
		{"oversell", flash, oversell, porcupine.Illegal},
		{"oversell standard", standard, oversell, porcupine.Illegal},
		{"late confirm double consume", one, lateDouble, porcupine.Illegal},
		{"retry double consume standard", standard, retryDouble, porcupine.Illegal},
		{"retry double consume flash (undersell is allowed)", flash, retryDouble, porcupine.Ok},
		{"indeterminate took effect", one, legal, porcupine.Ok},
		{"retry of a held order refused", one, retryRefused, porcupine.Illegal},
		{"retry refused by a fresh flag", flagged, flagRefusal(20), porcupine.Ok},
		{"retry refused by a flag past its window", flagged, flagRefusal(40), porcupine.Illegal},
		{"retry refused by a flag, standard", voucherSpec{stock: 1, perUser: 1, flagWindow: 15, exact: true}, flagRefusal(20), porcupine.Illegal},
		{"conflict with a claim in flight", one, inFlight, porcupine.Ok},
		{"conflict without a claimer", one, noClaimer, porcupine.Illegal},
		{"conflict with a claim in flight, standard", voucherSpec{stock: 1, perUser: 1, exact: true}, inFlight, porcupine.Illegal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops := build(tc.ops)
			nm := linearizabilityModel(tc.spec)
			model := nm.ToModel()
			got, info := porcupine.CheckOperationsVerbose(model, ops, linCheckTimeout)
			assert.Equal(t, tc.want, got, "Check(%s) = %v, want %v", tc.name, got, tc.want)
			if got == porcupine.Illegal {
				// The failure path writes a visualization.
				path := filepath.Join(t.TempDir(), "history.html")
				require.NoError(t, porcupine.VisualizePath(model, info, path))
				fi, err := os.Stat(path)
				require.NoError(t, err)
				assert.Positive(t, fi.Size())
				assert.Contains(t, linExcerpt(ops, info), "none of these fits next")
			}
		})
	}
}

// summarizeLinHistory counts the answers of a history, to show what it covered.
func summarizeLinHistory(ops []porcupine.Operation) string {
	counts := map[string]int{}
	for _, op := range ops {
		in, r := op.Input.(linOp), op.Output.(linResult)
		k := linKindNames[in.Kind] + " "
		switch {
		case r.indeterminate():
			k += "?"
		case r.Code != "":
			k += r.Code
		default:
			k += fmt.Sprint(r.Status)
		}
		counts[k]++
	}
	keys := slices.Sorted(maps.Keys(counts))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, counts[k])
	}
	return strings.Join(parts, ", ")
}
