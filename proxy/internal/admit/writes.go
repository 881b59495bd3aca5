package admit

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/flashgate/flashgate/proxy/internal/ledger"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/voucher"
)

// written is what became of one claim at the gate and, when the gate
// admitted it (Reserved, Duplicate or Finished: its Result's Err is nil), at
// the ledger's admitted write.
type written struct {
	res     gate.Result
	gateErr error     // the script call's
	gated   time.Time // when the gate answered, for a claim sent

	sent     bool // the gate admitted it and it went to the ledger
	start    time.Time
	done     func() (alone bool) // ends its entry in writing
	rep      ledger.Reply
	writeErr error
}

// pending is a claim queued for its voucher's script call, on its way to the
// ledger when admitted.
type pending struct {
	cl   voucher.Claim
	hold time.Duration
	w    written
	out  chan written // gets w once, when its request has its answer
}

// answer hands w to p's request. It never blocks: a request takes one answer.
func (p *pending) answer(w written) {
	select {
	case p.out <- w:
	default:
	}
}

// admitThenWrite runs cl through the gate and, when admitted, through the
// ledger's admitted write. From the gate's answer on, the claim holds a use in
// Redis, or is a retry of one that does: what becomes of it is decided by the
// ledger's write, not by the client, so the write goes on when the client
// leaves (LEDGER_TIMEOUT bounds it); a claim dropped from the forward queue
// because its client left would keep its use with no row for a whole
// HANGING_GRACE. A retry (Duplicate) goes to the ledger too, never answered
// from this proxy's memory of its 201: Redis may still hold an order whose row
// was released or expired since, and the ledger's answer from the row both
// tells the client the truth and gives that use back (found by the VOPR).
// Coalescing, the voucher's script call hands what it admitted to the ledger's
// writer itself (admitBatch): the request's goroutine parks once, for the
// ledger's answer, not for the gate's in between.
func (a *Admitter) admitThenWrite(ctx context.Context, code string, cl voucher.Claim, hold time.Duration) written {
	if !a.cfg.Coalesce {
		res, err := a.admit(ctx, code, cl)
		w := written{res: res, gateErr: err, gated: time.Now()}
		if err == nil && res.Err() == nil {
			a.startWrite(code, cl, &w)
			if res == gate.Reserved {
				a.peers.admitted(note(code, cl, hold))
			}
			w.rep, w.writeErr = a.writer.Write(context.WithoutCancel(ctx), code, cl)
		}
		return w
	}
	p := &pending{cl: cl, hold: hold, out: make(chan written, 1)}
	t := a.batcher.Go(ctx, code, p, func(res gate.Result, err error) {
		if err != nil || res.Err() != nil {
			// Refused, failed, or never sent: its request has its answer.
			p.answer(written{res: res, gateErr: gateErr(code, err)})
		}
		// Admitted: admitBatch handed it to the writer, whose answer ends it.
	})
	select {
	case w := <-p.out:
		return w
	case <-ctx.Done():
	}
	// The client left: a claim still queued for the script is dropped (it
	// took nothing); one the script call took is answered as any other.
	if err := t.Abandon(); err != nil {
		return written{gateErr: gateErr(code, err)}
	}
	return <-p.out
}

// admitBatch is one script call for a batch of one voucher's claims (see
// reserveBatch); the claims it admitted go on to the ledger's writer
// together, one request to the ledger when they fit in one, before their
// requests hear from the gate.
func (a *Admitter) admitBatch(ctx context.Context, code string, ps []*pending) ([]gate.Result, error) {
	items := make([]gate.Item, len(ps))
	for i, p := range ps {
		items[i] = gate.Item{CustomerID: p.cl.CustomerID, OrderID: p.cl.OrderID, OrderAmount: p.cl.OrderAmount}
	}
	rs, err := a.reserveBatch(ctx, code, items)
	if err != nil || len(rs) != len(ps) {
		return rs, err // the batch answers each claim's request
	}
	gated := time.Now()
	var fs []ledger.Forward
	var notes []peerNote
	for i, p := range ps {
		if rs[i].Err() != nil {
			continue
		}
		p.w = written{res: rs[i], gated: gated}
		a.startWrite(code, p.cl, &p.w)
		if rs[i] == gate.Reserved {
			notes = append(notes, note(code, p.cl, p.hold))
		}
		fs = append(fs, ledger.Forward{Claim: p.cl, Then: func(rep ledger.Reply, err error) {
			p.w.rep, p.w.writeErr = rep, err
			p.answer(p.w)
		}})
	}
	if len(fs) > 0 {
		// Under the service's lifetime without its end: a shutdown drains
		// the writes under way, as it waits for their requests.
		a.writer.WriteAll(context.WithoutCancel(ctx), code, fs)
	}
	a.peers.admitted(notes...)
	return rs, nil
}

// startWrite records that the gate admitted cl and its write starts: in the
// admission window and in writing. A new use (Reserved) is named to the other
// proxies by the caller (peers.admitted), for all of a script call at once.
func (a *Admitter) startWrite(code string, cl voucher.Claim, w *written) {
	if a.window != nil {
		a.window.enter()
	}
	w.sent, w.start = true, time.Now()
	w.done = a.writing.add(code, cl)
}

// notDelivered reports whether a ledger call did nothing at the ledger: it was
// never sent (ledger.NeverSent), or the ledger shed it before any handler ran
// (api.HeaderShed). Then no row can exist for what it carried.
func notDelivered(rep ledger.Reply, err error) bool {
	if err == nil {
		return rep.Shed
	}
	return ledger.NeverSent(err)
}

// giveBack returns the Redis use of an admitted claim that provably never
// reached the ledger (notDelivered) and that no other request of this proxy
// is writing: no row can hold it, and its retry is admitted again. Giving it
// back is the proxy's to do, since the ledger never heard of the claim; left
// held, it would wait for the reconciler's HANGING_GRACE.
func (a *Admitter) giveBack(code, orderID string) {
	ctx, cancel := context.WithTimeout(a.base, a.cfg.RedisTimeout)
	defer cancel()
	if _, err := a.gate.GiveBack(ctx, code, orderID); err != nil {
		// Whether it ran is unknown now: the ledger settles it once it answers.
		a.log.Warn("give back a claim the ledger never received", "code", code, "order", orderID,
			"err", fmt.Errorf("handed over to the ledger: %w", err))
		a.handOver.Give(code, orderID)
	}
}

// writes tracks the admitted claims this proxy is writing, by voucher and
// orderId: a claim whose write was not delivered is given back only when no
// other write of the same order (a retry on another lane) overlapped it here.
// An earlier write of the order that committed left it held in Redis, so a
// later claim of it is a Duplicate, never given back.
type writes struct {
	mu sync.Mutex
	m  map[[2]string]*writing
}

type writing struct {
	n          int   // writes of the order under way
	overlapped bool  // two or more were under way at once since n was 0
	customer   int64 // of the first of them
}

// add records a write of cl's order starting; the returned func records its
// end and reports whether no other write of the order overlapped it.
func (w *writes) add(code string, cl voucher.Claim) (done func() (alone bool)) {
	k := [2]string{code, cl.OrderID}
	w.mu.Lock()
	if w.m == nil {
		w.m = map[[2]string]*writing{}
	}
	e := w.m[k]
	if e == nil {
		e = &writing{customer: cl.CustomerID}
		w.m[k] = e
	}
	e.n++
	e.overlapped = e.overlapped || e.n > 1
	w.mu.Unlock()
	return func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		alone := !e.overlapped
		if e.n--; e.n == 0 {
			delete(w.m, k)
		}
		return alone
	}
}

// has reports whether a write of cl's order for cl's customer is under way.
func (w *writes) has(code string, cl voucher.Claim) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.m[[2]string{code, cl.OrderID}]
	return e != nil && e.customer == cl.CustomerID
}
