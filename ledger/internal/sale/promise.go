package sale

import (
	"context"
	"fmt"
	"time"

	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/voucher"
)

// errPromisePending answers a retry of an order whose record may be in
// flight to the broker (its promise is not yet acknowledged): a 503, never
// a second record nor a 201 the log may not hold.
var errPromisePending = voucher.Errorf(voucher.CodeUnavailable,
	"the reservation's admission is being logged: retry shortly")

// promiseOf is what the 201 of claim cl of voucher v admitted at at
// promises: the discount and the hold's expiry of v's terms at admission.
func (l *Ledger) promiseOf(v voucher.Voucher, cl voucher.Claim, at time.Time) store.Logged {
	return store.Logged{Claim: cl, DiscountAmount: v.DiscountFor(cl.OrderAmount), AdmittedAt: at,
		ExpiresAt: at.Add(l.store.HoldOf(v)).Truncate(time.Millisecond)}
}

// promised is the reservation a promise answers with (the 201 it gave).
func promised(code string, p store.Logged) voucher.Reservation {
	amount := p.Claim.OrderAmount
	return voucher.Reservation{OrderID: p.Claim.OrderID, CustomerID: p.Claim.CustomerID, VoucherCode: code,
		Status: voucher.Reserved, DiscountAmount: p.DiscountAmount, CreatedAt: p.AdmittedAt, ExpiresAt: p.ExpiresAt,
		OrderAmount: &amount}
}

// answerPromise answers claim cl of an order of voucher code that has
// promise p, as its row will: the same 201 replayed, ORDER_CONFLICT for
// another customer or amount, 503 while the record may be in flight.
func answerPromise(code string, p gate.Promise, cl voucher.Claim) store.Written {
	if !p.Logged {
		return store.Written{Err: errPromisePending}
	}
	r := promised(code, store.Logged{Claim: voucher.Claim{CustomerID: p.CustomerID, OrderID: p.OrderID, OrderAmount: p.OrderAmount},
		DiscountAmount: p.DiscountAmount, AdmittedAt: p.AdmittedAt, ExpiresAt: p.ExpiresAt})
	return store.Written{Reservation: r, Err: store.RetryAnswer(r, code, cl), Replayed: true}
}

// answerFromRows answers the claims (those at only, or all when only is
// nil) whose orders have a row, from it, as the group commit answers them,
// and makes Redis hold this voucher's active ones; it returns the indexes of
// the others. An error: the rows could not be read, nothing was answered.
func (l *Ledger) answerFromRows(ctx context.Context, code string, claims []voucher.Claim, out []store.Written, only []int) ([]int, error) {
	if only == nil {
		only = make([]int, len(claims))
		for i := range only {
			only[i] = i
		}
	}
	some := make([]voucher.Claim, len(only))
	for j, i := range only {
		some[j] = claims[i]
	}
	existing, found, err := l.store.ExistingMany(ctx, code, some)
	if err != nil {
		return only, err
	}
	var rest []int
	var holding []gate.Order
	var foreign []string
	for j, i := range only {
		if !found[j] {
			rest = append(rest, i)
			continue
		}
		out[i] = existing[j]
		r := existing[j].Reservation
		switch {
		case r.VoucherCode != code:
			// ORDER_CONFLICT: the orderId is another voucher's, so the use
			// the gate took here for it is this claim's, and no row holds it.
			foreign = append(foreign, r.OrderID)
		case r.Status.Active() && r.CustomerID == claims[i].CustomerID:
			holding = append(holding, gate.Order{OrderID: r.OrderID, CustomerID: r.CustomerID})
		}
	}
	l.reassert(ctx, code, holding)
	if len(foreign) > 0 {
		if _, err := l.gate.GiveBack(context.WithoutCancel(ctx), code, foreign...); err != nil {
			l.log.Error("give back the uses of orderIds of other vouchers", "code", code, "orders", len(foreign), "err", err)
		}
	}
	return rest, nil
}

// unreadable answers the claims at idx 503 (the truth could not be read)
// and parks them: the settler gives back, once the database answers, the
// uses of those that have neither a row nor a promise.
func (l *Ledger) unreadable(ctx context.Context, code string, claims []voucher.Claim, out []store.Written, idx []int, err error) {
	ids := make([]string, len(idx))
	for j, i := range idx {
		out[i] = store.Written{Err: fmt.Errorf("answer %s/%s: %w: %w", code, claims[i].OrderID, err, voucher.ErrUnavailable)}
		ids[j] = claims[i].OrderID
	}
	l.log.Warn("log voucher's orders answered 503: their truth could not be read", "code", code, "orders", len(ids), "err", err)
	l.settler.Park(code, ids)
}

// production is a record appendAdmitted produces: the promise of claim i,
// new, or retaken from a promise its ledger left pending (takeOver).
type production struct {
	i       int
	rec     store.Logged
	retaken bool
}

// promiseStale is how old a pending promise is when a retry of it takes it
// over and produces its record again: past any produce a live ledger still
// waits for (produceTimeout for a record never sent; a record sent is
// answered within the broker's request timeout), so its ledger died or lost
// its broker. Two records of one promise are harmless: they carry the same
// values, and the consumer writes one row.
const promiseStale = 10 * time.Second

// promise records the promise of each claim at lead (no row; distinct
// orderIds) in Redis and returns the records to produce, each claim's 201
// in out. Every other claim is answered: from the promise its order had (a
// retry), from the row the consumer wrote meanwhile, ORDER_CONFLICT when
// another log voucher holds its orderId (its use here given back), 503 when
// Redis fails.
func (l *Ledger) promise(ctx context.Context, v voucher.Voucher, claims []voucher.Claim, out []store.Written, lead []int) []production {
	code := v.Code
	now := l.store.Clock().UTC().Truncate(time.Millisecond) // as the promise keeps it
	ps := make([]gate.Promise, len(lead))
	for j, i := range lead {
		p := l.promiseOf(v, claims[i], now)
		ps[j] = gate.Promise{OrderID: claims[i].OrderID, CustomerID: claims[i].CustomerID, OrderAmount: claims[i].OrderAmount,
			DiscountAmount: p.DiscountAmount, AdmittedAt: p.AdmittedAt, ExpiresAt: p.ExpiresAt}
	}
	had, found, err := l.gate.Promise(ctx, code, ps)
	if err != nil {
		l.unreadable(ctx, code, claims, out, lead, fmt.Errorf("promise in redis: %w", err))
		return nil
	}
	var made []int
	var produce []production
	for j, i := range lead {
		if !found[j] {
			made = append(made, i)
			out[i] = store.Written{Reservation: promised(code, l.promiseOf(v, claims[i], now))}
			continue
		}
		out[i] = answerPromise(code, had[j], claims[i])
		if p, ok := l.takeOver(ctx, code, had[j], claims[i], now); ok {
			out[i] = store.Written{Reservation: promised(code, p), Replayed: true}
			produce = append(produce, production{i: i, rec: p, retaken: true})
		}
	}
	mine := l.claimOrders(ctx, v, claims, out, made)
	if len(mine) == 0 {
		return produce
	}
	// A retry that raced the consumer's commit (the row written and its
	// promise removed after the first read) is answered from the row.
	rest, err := l.answerFromRows(ctx, code, claims, out, mine)
	if err != nil {
		l.unpromise(context.WithoutCancel(ctx), code, idsAt(claims, mine), false)
		l.unreadable(ctx, code, claims, out, mine, err)
		return produce
	}
	if len(rest) < len(mine) {
		inRest := make(map[int]bool, len(rest))
		for _, i := range rest {
			inRest[i] = true
		}
		var own, foreign []int
		for _, i := range mine {
			switch {
			case inRest[i]:
			case out[i].Reservation.VoucherCode == code:
				own = append(own, i)
			default:
				foreign = append(foreign, i) // its use here is this claim's: given back once unpromised
			}
		}
		bg := context.WithoutCancel(ctx)
		l.unpromise(bg, code, idsAt(claims, own), false)
		l.unpromise(bg, code, idsAt(claims, foreign), true)
	}
	for _, i := range rest {
		produce = append(produce, production{i: i, rec: l.promiseOf(v, claims[i], now)})
	}
	return produce
}

// takeOver takes over promise p of claim cl's order when p is still pending
// promiseStale after its admission and cl is the same claim (customer and
// amount; another is answered from p as it stands), and returns the record
// to produce again: p's own values.
func (l *Ledger) takeOver(ctx context.Context, code string, p gate.Promise, cl voucher.Claim, now time.Time) (store.Logged, bool) {
	if p.Logged || p.CustomerID != cl.CustomerID || p.OrderAmount != cl.OrderAmount || now.Sub(p.AdmittedAt) < promiseStale {
		return store.Logged{}, false
	}
	ok, err := l.gate.TakeOver(ctx, code, p.OrderID, now.Add(-promiseStale))
	if err != nil || !ok {
		return store.Logged{}, false // answered 503 as pending
	}
	l.log.Warn("a pending promise taken over: its record is produced again", "code", code, "order", p.OrderID,
		"admittedAt", p.AdmittedAt)
	return store.Logged{Claim: cl, DiscountAmount: p.DiscountAmount, AdmittedAt: p.AdmittedAt, ExpiresAt: p.ExpiresAt}, true
}

// abandon removes the promises of orderIDs whose produce failed and gives
// back the uses of those no retry took over meanwhile (a retaken one's
// record may be in the log).
func (l *Ledger) abandon(ctx context.Context, code string, orderIDs []string) {
	if len(orderIDs) == 0 {
		return
	}
	removed, err := l.gate.Abandon(ctx, code, orderIDs...)
	if err != nil {
		// Left pending: a retry takes them over after promiseStale.
		l.log.Error("promises of failed produces not removed", "code", code, "orders", len(orderIDs), "err", err)
		return
	}
	l.freeOrders(ctx, code, removed)
	if _, err := l.gate.GiveBack(ctx, code, removed...); err != nil {
		l.log.Error("give back after a failed append to the admissions log", "code", code, "orders", len(removed), "err", err)
	}
}

// claimOrders names voucher v as the log voucher of the orders at made
// (each just promised), and returns those it holds. An orderId another log
// voucher holds is ORDER_CONFLICT (its promise removed and the use its
// claim took here given back); one Redis could not name is a 503.
func (l *Ledger) claimOrders(ctx context.Context, v voucher.Voucher, claims []voucher.Claim, out []store.Written, made []int) []int {
	code := v.Code
	expires := v.EndsAt.Add(orderClaimSlack)
	if now := l.store.Clock(); expires.Before(now) {
		expires = now.Add(orderClaimSlack)
	}
	owners, errs := l.gate.ClaimOrders(ctx, code, idsAt(claims, made), expires)
	var mine, taken, unknown []int
	var failure error
	for j, i := range made {
		switch {
		case errs[j] != nil:
			unknown, failure = append(unknown, i), errs[j]
		case owners[j] != code:
			taken = append(taken, i)
			out[i] = store.Written{Err: voucher.ErrOrderConflict}
		default:
			mine = append(mine, i)
		}
	}
	bg := context.WithoutCancel(ctx)
	l.unpromise(bg, code, idsAt(claims, taken), true)
	if len(unknown) > 0 {
		l.unpromise(bg, code, idsAt(claims, unknown), false)
		l.unreadable(ctx, code, claims, out, unknown, fmt.Errorf("claim the orderIds in redis: %w", failure))
	}
	return mine
}

// orderClaimSlack is how long past its voucher's end an orderId's claim
// (gate.ClaimOrders) lives at most, as the voucher's keys do.
const orderClaimSlack = 24 * time.Hour

// unpromise removes the promises of orderIDs of code and frees their
// orderIds; giveBack then gives their uses back in Redis (their records are
// not in the log). A failure is logged: a promise left behind keeps its use
// held (undersell) until the consumer or an operator removes it.
func (l *Ledger) unpromise(ctx context.Context, code string, orderIDs []string, giveBack bool) {
	if len(orderIDs) == 0 || l.gate == nil {
		return
	}
	if err := l.gate.Forget(ctx, code, orderIDs...); err != nil {
		l.log.Error("promises not removed", "code", code, "orders", len(orderIDs), "err", err)
		return
	}
	l.freeOrders(ctx, code, orderIDs)
	if !giveBack {
		return
	}
	if _, err := l.gate.GiveBack(ctx, code, orderIDs...); err != nil {
		l.log.Error("give back after a failed append to the admissions log", "code", code, "orders", len(orderIDs), "err", err)
	}
}

// freeOrders frees the orderIds code holds (gate.ClaimOrders). A failure is
// logged: the claim outlives its order until its expiry, and only refuses
// the same orderId on another log voucher meanwhile.
func (l *Ledger) freeOrders(ctx context.Context, code string, orderIDs []string) {
	if err := l.gate.FreeOrders(ctx, code, orderIDs...); err != nil {
		l.log.Error("orderIds not freed", "code", code, "orders", len(orderIDs), "err", err)
	}
}

// distinct splits the claims at fresh into the first claim of each orderId
// (lead) and the later ones (followers).
func distinct(claims []voucher.Claim, fresh []int) (lead, followers []int) {
	seen := map[string]bool{}
	for _, i := range fresh {
		if seen[claims[i].OrderID] {
			followers = append(followers, i)
			continue
		}
		seen[claims[i].OrderID] = true
		lead = append(lead, i)
	}
	return lead, followers
}

// answerFollowers answers each claim at followers as the first claim of its
// orderId was answered (out, once final): a replay of its 201 for the same
// claim, ORDER_CONFLICT for another, the same error.
func answerFollowers(code string, claims []voucher.Claim, out []store.Written, followers []int) {
	first := map[string]int{}
	for i := len(claims) - 1; i >= 0; i-- {
		first[claims[i].OrderID] = i
	}
	for _, i := range followers {
		o := out[first[claims[i].OrderID]]
		if o.Err == nil {
			o = store.Written{Reservation: o.Reservation, Err: store.RetryAnswer(o.Reservation, code, claims[i]), Replayed: true}
		}
		out[i] = o
	}
}

// idsAt is the orderIds of the claims at idx.
func idsAt(claims []voucher.Claim, idx []int) []string {
	ids := make([]string, len(idx))
	for j, i := range idx {
		ids[j] = claims[i].OrderID
	}
	return ids
}

// RetakeStale produces again the records of code's promises still pending
// (or taken over) promiseStale after their admission: a ledger died, or its
// Redis step failed, between the promise and its logged or abandoned mark,
// so no retry of the same claim may ever come to take them over. Each
// record carries its promise's values; the consumer writes one row of two
// such records, so a record that was in the log already costs nothing. The
// promise becomes logged once the broker acknowledges; a failed produce
// leaves it taken over, for the next pass. It returns how many it retook.
func (l *Ledger) RetakeStale(ctx context.Context, code string) (int, error) {
	if l.gate == nil || l.admissions == nil {
		return 0, nil
	}
	ps, err := l.gate.TakeOverStale(ctx, code, l.store.Clock().Add(-promiseStale))
	if len(ps) == 0 {
		return 0, err
	}
	batch := make([]store.Logged, len(ps))
	ids := make([]string, len(ps))
	for i, p := range ps {
		batch[i] = store.Logged{Claim: voucher.Claim{CustomerID: p.CustomerID, OrderID: p.OrderID, OrderAmount: p.OrderAmount},
			DiscountAmount: p.DiscountAmount, AdmittedAt: p.AdmittedAt, ExpiresAt: p.ExpiresAt}
		ids[i] = p.OrderID
	}
	l.log.Warn("pending promises left behind are produced again", "code", code, "orders", len(ps), "err", err)
	writing := l.settler.writing(code, ids)
	errs := l.admissions.Append(ctx, code, batch)
	writing()
	var logged []string
	for i, e := range errs {
		if e == nil {
			logged = append(logged, ids[i])
		} else if err == nil {
			err = e
		}
	}
	if merr := l.gate.MarkLogged(context.WithoutCancel(ctx), code, logged...); merr != nil && err == nil {
		err = merr
	}
	return len(ps), err
}
