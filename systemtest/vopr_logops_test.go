package systemtest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The log round's operator: TestVOPR's changes, the terms a 201 promised
// (discountAmount, holdTtl, minOrderAmount), and replays of dead letters.
var voprLogOperatorMix = []voprMix{
	{"patch-total", 20}, {"patch-window", 10}, {"patch-terms", 16}, {"patch-perUser", 14},
	{"pause", 8}, {"resume", 20}, {"replay", 10},
}

// operateLog is the log round's operator: admin calls to either ledger on
// random vouchers of the round until stop, chosen from the seed.
func (run *voprLogRun) operateLog(stop <-chan struct{}) {
	r := run.r
	rng := rand.New(rand.NewPCG(r.seed, 1000))
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(30+rng.IntN(150)) * time.Millisecond):
		}
		v := r.vouchers[rng.IntN(len(r.vouchers))]
		kind := pickWeighted(rng, voprLogOperatorMix, voprMix.weigh).kind
		ledger := rng.IntN(2)
		var body map[string]any
		switch kind {
		case "replay":
			run.replay(ledger, rng.IntN(3)+1)
			continue
		case "patch-total":
			body = map[string]any{"totalLimit": rng.IntN(v.maxLimit + 1)}
		case "patch-perUser":
			body = map[string]any{"perUserLimit": 1 + rng.IntN(3)}
		case "patch-terms":
			body = voprLogTerms(rng)
		case "patch-window":
			body = voprWindow(rng)
		}
		run.ledgerAdminOp(ledger, kind, v.code, body)
	}
}

// voprLogTerms is a PATCH of one to three of the terms a 201 promises or
// decides on: the discount (below the orders' amounts or above), the hold,
// the minimum (above the drivers' usual 5,000 or not).
func voprLogTerms(rng *rand.Rand) map[string]any {
	body := map[string]any{}
	for len(body) == 0 {
		if rng.IntN(2) == 0 {
			body["discountAmount"] = []int64{100_000, 3_000, 6_000}[rng.IntN(3)]
		}
		if rng.IntN(2) == 0 {
			body["holdTtl"] = (time.Duration(1+rng.IntN(int(voprLogMaxHold/time.Second))) * time.Second).String()
		}
		if rng.IntN(2) == 0 {
			body["minOrderAmount"] = []int64{1_000, 6_000}[rng.IntN(2)]
		}
	}
	return body
}

// voprWindow is a PATCH of the window: open, not started yet or ended.
func voprWindow(rng *rand.Rand) map[string]any {
	now := time.Now()
	from, to := -time.Hour, time.Hour
	switch p := rng.IntN(100); {
	case p < 15:
		from, to = time.Hour, 2*time.Hour
	case p < 30:
		from, to = -2*time.Hour, -time.Minute
	}
	return map[string]any{"startsAt": now.Add(from).UTC().Format(time.RFC3339Nano),
		"endsAt": now.Add(to).UTC().Format(time.RFC3339Nano)}
}

// ledgerAdminOp is adminOp through ledger i (0: the proxy's, 1: the other).
func (run *voprLogRun) ledgerAdminOp(i int, kind, code string, body map[string]any) {
	_, base := run.ls.ledger(i)
	ctx, cancel := voprCallCtx("", 0)
	defer cancel()
	u := base + "/admin/vouchers/" + code
	op := voprOp{actor: fmt.Sprintf("operator@%d", i), kind: kind, code: code, start: run.h.now()}
	if body != nil {
		raw, _ := json.Marshal(body)
		op.detail = string(raw)
		op.answer = run.client.do(ctx, http.MethodPatch, u, ledgerToken, body)
	} else {
		op.answer = run.client.do(ctx, http.MethodPost, u+"/"+kind, ledgerToken, nil)
	}
	op.end = run.h.now()
	if kind == "patch-perUser" {
		run.notePerUserChange(code, op.answer)
	}
	run.h.add(op)
	run.stats.op(kind, op.answer.status)
}

// voprFailed is an entry of GET /admin/admissions/failed.
type voprFailed struct {
	Code       string `json:"code"`
	OrderID    string `json:"orderId"`
	CustomerID int64  `json:"customerId"`
	Reason     string `json:"reason"`
	Message    string `json:"message"`
	Resolution string `json:"resolution"`
}

// failed lists the round's failed admissions through ledger i (all: closed
// ones too).
func (run *voprLogRun) failed(i int, all bool) ([]voprFailed, error) {
	_, base := run.ls.ledger(i)
	ctx, cancel := voprCallCtx("", 0)
	defer cancel()
	q := url.Values{"limit": {"500"}} // the route's largest page: more is a failed round all the same
	if all {
		q.Set("all", "true")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/admin/admissions/failed?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+ledgerToken)
	resp, err := run.client.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /admin/admissions/failed: %s", resp.Status)
	}
	var page struct {
		Admissions []voprFailed `json:"admissions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		return nil, err
	}
	mine := map[string]bool{}
	for _, c := range run.codes() {
		mine[c] = true
	}
	var out []voprFailed
	for _, f := range page.Admissions {
		if mine[f.Code] {
			out = append(out, f)
		}
	}
	return out, nil
}

// replay replays up to n of the round's open dead letters through ledger i,
// as an operator would once the cause is gone, and records each.
func (run *voprLogRun) replay(i, n int) {
	open, err := run.failed(i, false)
	if err != nil {
		return // that ledger is down: nothing to replay through it
	}
	_, base := run.ls.ledger(i)
	for _, f := range open[:min(n, len(open))] {
		ctx, cancel := voprCallCtx("", 0)
		op := voprOp{actor: fmt.Sprintf("operator@%d", i), kind: "replay", code: f.Code, order: f.OrderID,
			customer: f.CustomerID, detail: "dead-lettered " + f.Reason, start: run.h.now()}
		op.answer = run.client.do(ctx, http.MethodPost,
			base+"/admin/admissions/failed/"+f.Code+"/"+url.PathEscape(f.OrderID)+"/replay", ledgerToken, nil)
		cancel()
		op.end = run.h.now()
		run.h.add(op)
		run.stats.op("replay", op.answer.status)
	}
}

// The log round's faults: TestVOPR's that keep Redis' data, and those of
// the log: every consumer's fetches held (records produced meanwhile wait in
// the log), one ledger stopped (SIGSTOP: its consumer and its routes hang),
// the broker stopped longer than HANGING_GRACE, a ledger killed (-9) and
// started again.
var voprLogFaultMix = []voprFault{
	{"hold-consumers", 14, false}, {"pause-ledger", 10, false}, {"broker-down", 8, false}, {"kill-ledger", 8, false},
	{"lock-voucher", 6, false}, {"lock-usage", 4, false}, {"pause-redis", 6, false},
}

// injectLog runs faults one after another until stop, chosen from the seed;
// each fault ends (restarts, resumes, releases) before the next begins.
func (run *voprLogRun) injectLog(stop <-chan struct{}) {
	r := run.r
	rng := rand.New(rand.NewPCG(r.seed, 2000))
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(40+rng.IntN(300)) * time.Millisecond):
		}
		f := pickWeighted(rng, voprLogFaultMix, func(f voprFault) int { return f.weight })
		v := r.vouchers[rng.IntN(len(r.vouchers))]
		hold := time.Duration(10+rng.IntN(390)) * time.Millisecond
		customer := int64(rng.IntN(r.customers) + 1)
		op := voprOp{actor: "fault", kind: f.kind, code: v.code, start: run.h.now()}
		handled, err := run.applyLogFault(rng, f.kind, &op)
		if !handled { // TestVOPR's
			_, err = run.applyFault(rng, f.kind, v, hold, customer, &op)
		}
		op.end = run.h.now()
		op.answer = voprAnswer{status: 200}
		if err != nil {
			op.answer = voprAnswer{note: err.Error()}
		}
		run.h.add(op)
		run.faults.Add(1)
		run.stats.fault(f.kind)
	}
}

// applyLogFault injects one of the log's faults and ends it (true); any
// other kind it leaves alone (false). A log fault strikes every voucher: op
// names none (orderHistory lists it beside every order).
func (run *voprLogRun) applyLogFault(rng *rand.Rand, kind string, op *voprOp) (bool, error) {
	switch kind {
	case "hold-consumers":
		d := time.Duration(300+rng.IntN(3700)) * time.Millisecond
		op.code, op.detail = "", "every fetch held for "+d.String()
		run.ls.kafka.holdFetches(d)
		return true, nil
	case "pause-ledger":
		i, d := rng.IntN(2), time.Duration(200+rng.IntN(2800))*time.Millisecond
		svc, _ := run.ls.ledger(i)
		op.code, op.detail = "", fmt.Sprintf("ledger %d SIGSTOP for %v", i, d)
		if err := svc.Pause(); err != nil {
			return true, err
		}
		time.Sleep(d)
		return true, svc.Resume()
	case "broker-down":
		d := voprLogGrace + time.Duration(200+rng.IntN(2800))*time.Millisecond
		gone, err := run.ls.kafka.restart(d)
		op.code, op.detail = "", fmt.Sprintf("down for %v (HANGING_GRACE %v), gone %v", d, voprLogGrace, gone.Round(time.Millisecond))
		return true, err
	case "kill-ledger":
		i, d := rng.IntN(2), time.Duration(rng.IntN(500))*time.Millisecond
		svc, _ := run.ls.ledger(i)
		op.code, op.detail = "", fmt.Sprintf("ledger %d kill -9, restarted after %v", i, d)
		if err := svc.Kill(); err != nil {
			return true, err
		}
		time.Sleep(d)
		return true, svc.Restart()
	}
	return false, nil
}

// heal brings back whatever a fault left down once the round stopped: a
// ledger whose restart failed (its /healthz is asked), a stopped one.
func (run *voprLogRun) heal(t *testing.T) {
	t.Helper()
	for i := range 2 {
		svc, base := run.ls.ledger(i)
		if err := svc.Resume(); err != nil {
			t.Logf("SIGCONT ledger %d: %v", i, err)
		}
		ctx, cancel := voprCallCtx("", 0)
		a := run.client.do(ctx, http.MethodGet, base+"/healthz", "", nil)
		cancel()
		if a.status != http.StatusOK {
			t.Logf("ledger %d answers /healthz %v after the round: restarting it", i, a)
			assert.NoError(t, svc.Restart(), "restart ledger %d", i)
		}
	}
}

// holdFetches holds every fetch the broker gets for d, then serves them as
// usual: the consumers of both ledgers stand still while produces, commits
// and the group's heartbeats go on, so records pile up unconsumed in the log.
// franz-go fetches on a connection of its own, so a held fetch holds nothing
// else. A restart of the broker meanwhile ends the hold (Close wakes a held
// control); the round's faults come one at a time, so none does.
func (k *persistedKafka) holdFetches(d time.Duration) {
	k.mu.Lock()
	c := k.c
	k.mu.Unlock()
	release := make(chan struct{})
	c.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		select {
		case <-release:
			c.DropControl()
		default:
			c.SleepControl(func() { <-release })
		}
		return nil, nil, false // then served by the broker as usual
	})
	time.Sleep(d)
	close(release)
}

// TestHoldFetches: the log VOPR's hold-consumers fault holds a consumer's
// fetches for as long as asked while produces go through, and serves them
// after: a record produced before the hold reaches a consumer only once the
// hold has ended.
func TestHoldFetches(t *testing.T) {
	t.Parallel()
	k := startPersistedKafka(t)
	producer, err := kgo.NewClient(kgo.SeedBrokers(k.addr), kgo.DefaultProduceTopic(admissionsTopic))
	require.NoError(t, err)
	defer producer.Close()
	require.NoError(t, producer.ProduceSync(t.Context(), &kgo.Record{Value: []byte("before")}).FirstErr())

	const hold = time.Second
	start := time.Now()
	held := make(chan struct{})
	go func() { defer close(held); k.holdFetches(hold) }()
	time.Sleep(50 * time.Millisecond) // the hold is in place
	require.NoError(t, producer.ProduceSync(t.Context(), &kgo.Record{Value: []byte("during")}).FirstErr(),
		"a produce goes through while fetches are held")
	consumer, err := kgo.NewClient(kgo.SeedBrokers(k.addr), kgo.ConsumeTopics(admissionsTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer consumer.Close()
	var got []string
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for len(got) < 2 && ctx.Err() == nil {
		consumer.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		if len(got) > 0 {
			assert.GreaterOrEqual(t, time.Since(start), hold, "a record consumed before the hold ended")
		}
	}
	assert.ElementsMatch(t, []string{"before", "during"}, got)
	<-held
}
