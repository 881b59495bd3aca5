package chaos

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/loadtest/internal/verify"
)

// The checks on how the system behaved through the fault, beside the
// invariants.
const (
	checkFast503   = "fast 503 while the fault lasted"
	checkRecovered = "reserves answered again"
	checkSettled   = "Redis = DB, exactly, on its own"
	checkAnswered  = "no 503 and no connection error"
)

// fast503Check: while the fault lasted, the system said "unavailable" fast
// instead of holding the clients. The bound is the fault's own cost (a
// timeout or two) plus twice what the machine's load cost every answer in the
// same run: on a busy machine a 503 queues as a 201 does, once before the
// gate and once on its way through the ledger's timeouts. That cost is the
// larger of the answers' p99 before the fault and the proxy's /healthz p99
// while it lasted (liveness): a fault that takes the CPU itself, as a
// Postgres restart does on two cores, slows every answer, those decided at
// the proxy's door included. On a quiet machine (answers in tens of ms) the
// bound stays near the fault's own cost.
func (res *Result) fast503Check(bound time.Duration) verify.Check {
	machine := max(res.BeforeFaultP99, res.DuringFaultLivenessP99)
	b := float64(bound.Milliseconds()) + 2*machine
	return verify.Check{Name: checkFast503,
		Pass: res.DuringFault503 == 0 || res.DuringFault503P99 <= b,
		Detail: fmt.Sprintf("%d answers 503 to requests sent while the fault lasted: p99 %.0f ms, max %.0f ms (bound: p99 within %s plus twice the machine's load, the larger of the answers' p99 before the fault, %.0f ms, and the proxy's /healthz p99 while it lasted, %.0f ms: %.0f ms); %d requests sent meanwhile answered 201",
			res.DuringFault503, res.DuringFault503P99, res.DuringFault503Max, bound, res.BeforeFaultP99, res.DuringFaultLivenessP99, b, res.DuringFault201)}
}

// answeredCheck: every request got its real answer; no 503 and no connection
// error (a deploy must not show).
func (res *Result) answeredCheck() verify.Check {
	return verify.Check{Name: checkAnswered, Pass: res.Unavailable == 0 && res.Errors == 0,
		Detail: fmt.Sprintf("%d answers 503 and %d without an answer or with another status, of %d requests%s; %d requests resent by the clients' transport after a server closed an idle keep-alive connection under them (Idempotency-Key)",
			res.Unavailable, res.Errors, res.Requests, samples(res.ErrorSamples), res.Replays)}
}

func samples(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return " (" + strings.Join(s, "; ") + ")"
}

// recoveredCheck: reserves were answered again within bound of the fault's
// end; duringFault is how many probes were sent while it lasted.
func (res *Result) recoveredCheck(bound time.Duration, duringFault int) verify.Check {
	rec := fmt.Sprintf("never (probed for %s after the fault)", bound)
	if res.RecoverySeconds >= 0 {
		rec = fmt.Sprintf("%.2f s", res.RecoverySeconds)
	}
	return verify.Check{Name: checkRecovered, Pass: res.RecoverySeconds >= 0 && res.RecoverySeconds <= res.RecoveryBound,
		Detail: fmt.Sprintf("%d probes in a row answered %s after the fault ended (bound %s); %d probes, %d of them while the fault lasted",
			probesInARow, rec, bound, res.Probes, duringFault)}
}

// settledCheck: Redis came to agree with the database on its own, within
// bound of the last request; quiet is the last request's time after the
// fault's end.
func (res *Result) settledCheck(bound, quiet time.Duration) verify.Check {
	set := fmt.Sprintf("never within %s", bound)
	if res.SettleSeconds >= 0 {
		set = fmt.Sprintf("%.2f s", res.SettleSeconds)
	}
	return verify.Check{Name: checkSettled, Pass: res.SettleSeconds >= 0,
		Detail: fmt.Sprintf("remaining and held orders equal on both vouchers %s after the last request (%.2f s after the fault ended; bound %s)%s",
			set, quiet.Seconds()+max(res.SettleSeconds, 0), bound, suffix(res.SettleDetail))}
}

func suffix(s string) string {
	if s == "" {
		return ""
	}
	return "; last seen: " + s
}

// judged is one voucher's checks and final state.
type judged struct {
	checks         []verify.Check
	db             *verify.DBSummary
	redisRemaining *int64
}

// chaosChecks judges one voucher after a scenario: the burst's checks (see
// Checks), with "retries answered alike" made aware of time, plus an exact
// per-customer count. name prefixes every check's name.
func chaosChecks(ctx context.Context, b *verify.Bench, spec verify.VoucherSpec, plan load.Plan, shots []load.Shot, name string) (judged, error) {
	o, err := b.Outcome(ctx, spec, plan, shots)
	if err != nil {
		return judged{}, err
	}
	j := judged{db: o.DB.Summary(), redisRemaining: o.RedisRemaining()}
	for _, c := range verify.Checks(o) {
		if c.Name == "retries answered alike" {
			c = retriesAnsweredAlike(o)
		}
		j.checks = append(j.checks, c)
	}
	j.checks = append(j.checks, refusalsHoldNothing(o))
	bad, err := b.UsageMismatches(ctx, spec.Code)
	if err != nil {
		return judged{}, err
	}
	j.checks = append(j.checks, verify.Check{Name: "retries consumed nothing", Pass: bad == 0 && o.DB.Used == len(o.DB.Active),
		Detail: fmt.Sprintf("%d customers whose voucher_customer_usage count differs from their RESERVED/CONFIRMED rows; used_count %d, active rows %d (order_id is UNIQUE)",
			bad, o.DB.Used, len(o.DB.Active))})
	for i := range j.checks {
		j.checks[i].Name = name + j.checks[i].Name
	}
	return j, nil
}

// retriesAnsweredAlike is Checks' "retries answered alike" with time in it.
// Under faults a use held for an unanswered request comes back when the
// reconciler frees it, so an order refused OUT_OF_STOCK or ALREADY_USED may be
// admitted by a later retry: that is one use, sold late, and is counted, not
// failed. What must never happen is a refusal for a request sent after a 201
// for the same order came back: the order holds its use.
func retriesAnsweredAlike(o verify.Outcome) verify.Check {
	ok := firstAdmitted(o)
	var after []string
	late := map[int32]bool{}
	for _, s := range o.Shots {
		ord, refused := refusedOrder(o.Plan, s)
		if !refused {
			continue
		}
		t, admitted := ok[ord]
		switch {
		case !admitted:
		case s.At.After(t):
			after = append(after, o.Plan.Orders[ord].ID)
		default:
			late[ord] = true
		}
	}
	return verify.Check{Name: "retries answered alike", Pass: len(after) == 0,
		Detail: fmt.Sprintf("%d retries; %d refusals sent after the order's 201 came back%s; %d orders refused earlier and admitted by a later retry once a held use came back",
			o.Plan.Retries, len(after), histories(o, after), len(late))}
}

// refusalsHoldNothing checks that no order whose last answer was a refusal
// holds a use in the database: the client was told "no", so it will not pay,
// and its use would be held until the reservation expires. A refusal sent
// while a request of the same order was still on its way to a 201 is not the
// last answer: the two were in flight together, and the 201's admission may
// have come after the refusal (a use given back between the two; the chaos
// soak's pg-restart round, 2026-12-05). "Retries answered alike" judges a
// refusal sent after a 201 came back.
func refusalsHoldNothing(o verify.Outcome) verify.Check {
	last := map[int32]load.Shot{}         // order -> its last answered request, by send time
	admittedBack := map[int32]time.Time{} // order -> when its last 201 came back
	for _, s := range o.Shots {
		if s.Failed() || s.Req < 0 || int(s.Req) >= len(o.Plan.Requests) {
			continue
		}
		ord := o.Plan.Requests[s.Req]
		if l, seen := last[ord]; !seen || s.At.After(l.At) {
			last[ord] = s
		}
		if back := s.At.Add(s.Latency); s.Status == http.StatusCreated && back.After(admittedBack[ord]) {
			admittedBack[ord] = back
		}
	}
	var bad []string
	refused := 0
	for ord, s := range last {
		if _, no := refusedOrder(o.Plan, s); !no || admittedBack[ord].After(s.At) {
			continue
		}
		refused++
		if _, held := o.DB.Active[o.Plan.Orders[ord].ID]; held {
			bad = append(bad, o.Plan.Orders[ord].ID)
		}
	}
	return verify.Check{Name: "refused orders hold no use", Pass: len(bad) == 0,
		Detail: fmt.Sprintf("%d orders whose last answer was a refusal; %d of them RESERVED/CONFIRMED in the database%s",
			refused, len(bad), histories(o, bad))}
}

// firstAdmitted maps each order answered 201 to when its first 201 came back.
func firstAdmitted(o verify.Outcome) map[int32]time.Time {
	ok := map[int32]time.Time{}
	for _, s := range o.Shots {
		if s.Status != http.StatusCreated || s.Req < 0 || int(s.Req) >= len(o.Plan.Requests) {
			continue
		}
		ord, at := o.Plan.Requests[s.Req], s.At.Add(s.Latency)
		if t, seen := ok[ord]; !seen || at.Before(t) {
			ok[ord] = at
		}
	}
	return ok
}

// refusedOrder returns the order of a shot answered 409 or 422.
func refusedOrder(p load.Plan, s load.Shot) (int32, bool) {
	if (s.Status != http.StatusConflict && s.Status != http.StatusUnprocessableEntity) ||
		s.Req < 0 || int(s.Req) >= len(p.Requests) {
		return 0, false
	}
	return p.Requests[s.Req], true
}

// histories shows what each of up to three orders was answered, in send
// order, with times from the first request of the burst: "X: 503 at 0.61 s,
// 201 at 0.80 s (back at 0.85 s), 409 OUT_OF_STOCK at 1.20 s". Transport
// errors carry no order and are not shown.
func histories(o verify.Outcome, ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	var t0 time.Time
	for _, s := range o.Shots {
		if t0.IsZero() || s.At.Before(t0) {
			t0 = s.At
		}
	}
	index := map[string]int32{}
	for i, ord := range o.Plan.Orders {
		index[ord.ID] = int32(i)
	}
	var parts []string
	for _, id := range ids[:min(3, len(ids))] {
		var shots []load.Shot
		for _, s := range o.Shots {
			if s.Req >= 0 && int(s.Req) < len(o.Plan.Requests) && o.Plan.Requests[s.Req] == index[id] {
				shots = append(shots, s)
			}
		}
		slices.SortFunc(shots, func(a, b load.Shot) int { return a.At.Compare(b.At) })
		var h []string
		for _, s := range shots {
			h = append(h, fmt.Sprintf("%s sent at %.3f s, back at %.3f s", load.StatusKey(s),
				s.At.Sub(t0).Seconds(), s.At.Add(s.Latency).Sub(t0).Seconds()))
		}
		parts = append(parts, id+": "+strings.Join(h, ", "))
	}
	return "; e.g. " + strings.Join(parts, "; ")
}

// waitSettled polls until Redis agrees exactly with the database on every
// code (remaining, and the orders holding uses) and returns how long that
// took, or -1 and what it saw last when bound passed first.
func waitSettled(ctx context.Context, b *verify.Bench, bound time.Duration, codes ...string) (time.Duration, string) {
	start := time.Now()
	var last string
	for {
		last = ""
		for _, code := range codes {
			if diff := settledDiff(ctx, b, code); diff != "" {
				last = code + ": " + diff
				break
			}
		}
		if last == "" {
			return time.Since(start), ""
		}
		if time.Since(start) > bound || ctx.Err() != nil {
			return -1, last
		}
		load.Sleep(ctx, settlePolling)
	}
}

// settledDiff says how Redis differs from the database for code, or "" when
// it does not.
func settledDiff(ctx context.Context, b *verify.Bench, code string) string {
	d, err := b.DBState(ctx, code)
	if err != nil {
		return err.Error()
	}
	st, loaded, err := b.RedisState(ctx, code)
	switch {
	case err != nil:
		return err.Error()
	case !loaded:
		return "not loaded in Redis"
	case st.Remaining != int64(d.TotalLimit-d.Used):
		return fmt.Sprintf("Redis remaining %d, DB remaining %d", st.Remaining, d.TotalLimit-d.Used)
	}
	held := 0
	for _, o := range st.Orders {
		if c, ok := d.Active[o.OrderID]; ok && c == o.CustomerID {
			held++
		}
	}
	if held != len(d.Active) || len(st.Orders) != len(d.Active) {
		return fmt.Sprintf("Redis holds %d orders, %d of them active in the DB; DB has %d active", len(st.Orders), held, len(d.Active))
	}
	return ""
}

// prober sends one reserve at a time to its own voucher, from the start of
