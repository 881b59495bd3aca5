package sale

import (
	"context"
	"errors"
	"fmt"

	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Refusal is an admission from the log that the database refused for good:
// for a promised record only a constraint can (a bug: the gate admitted it),
// for an older record a guard of the terms at consume time too. It goes to
// the dead-letter topic, and its Redis use was given back.
type Refusal struct {
	Batch  int    // the index of its Batch in WriteLogged's argument
	Code   string // the voucher
	Claim  voucher.Claim
	Reason string // the refusal's error code, such as OUT_OF_STOCK
	Err    error
}

// WriteLogged writes admissions read from the log, of one or several
// vouchers, idempotent by orderId: an admission whose order already has its
// own row (a redelivery) changes nothing. A batch with Promised records is
// written as they promise (writePromised: the terms at consume time decide
// nothing); one of older records is decided as it always was
// (Writer.WriteBatches). It returns the refused ones, whose uses it gave
// back in Redis, and removes the promises of every record it decided; an
// error is a fault (the database could not tell): nothing was decided and
// the whole batch must be written again.
func (l *Ledger) WriteLogged(ctx context.Context, batch []Batch) ([]Refusal, error) {
	writing := make([]func(), len(batch))
	for i, b := range batch {
		ids := make([]string, len(b.Claims))
		for j, cl := range b.Claims {
			ids[j] = cl.OrderID
		}
		writing[i] = l.settler.writing(b.Code, ids)
	}
	outs, err := l.writeLoggedBatches(ctx, batch)
	for _, done := range writing {
		done()
	}
	if err != nil {
		return nil, fmt.Errorf("write the logged admissions of %d vouchers: %w", len(batch), err)
	}
	for i, b := range batch {
		for j := range outs[i] {
			if err := outs[i][j].Err; voucher.IsFault(err) && !errors.Is(err, errAbandoned) {
				return nil, fmt.Errorf("write logged admission %s/%s: %w", b.Code, b.Claims[j].OrderID, outs[i][j].Err)
			}
		}
	}
	var refused []Refusal
	for i, b := range batch {
		r, err := l.settleLogged(ctx, b, outs[i])
		if err != nil {
			return nil, err
		}
		for k := range r {
			r[k].Batch = i
		}
		refused = append(refused, r...)
	}
	return refused, nil
}

// writeLoggedBatches writes the promised batches (writePromised) and the
// older ones (Writer.WriteBatches), and answers each batch's claims.
func (l *Ledger) writeLoggedBatches(ctx context.Context, batch []Batch) ([][]store.Written, error) {
	var older, promised []Batch
	var olderAt, promisedAt []int
	for i, b := range batch {
		if len(b.Promised) == len(b.Claims) && len(b.Claims) > 0 {
			promised, promisedAt = append(promised, b), append(promisedAt, i)
		} else {
			older, olderAt = append(older, b), append(olderAt, i)
		}
	}
	outs := make([][]store.Written, len(batch))
	for _, part := range []struct {
		batch []Batch
		at    []int
		write func(context.Context, []Batch) ([][]store.Written, error)
	}{{older, olderAt, l.writer.writeBatches}, {promised, promisedAt, l.writePromised}} {
		if len(part.batch) == 0 {
			continue
		}
		o, err := part.write(ctx, part.batch)
		if err != nil {
			return nil, err
		}
		for j, i := range part.at {
			outs[i] = o[j]
		}
	}
	return outs, nil
}

// writePromised writes promised batches in one transaction when no
// constraint fires (store.InsertLogged), else voucher by voucher and half by
// half until the record that breaks one is alone and refused alone. A
// repeated orderId follows its first record.
func (l *Ledger) writePromised(ctx context.Context, batch []Batch) ([][]store.Written, error) {
	ctx, cancel := context.WithTimeout(ctx, l.writer.timeout)
	defer cancel()
	groups := make([]store.LoggedGroup, len(batch))
	firsts := make([]map[string]int, len(batch)) // orderId -> its index in the group
	skip, err := l.abandonedOf(ctx, batch)
	if err != nil {
		return nil, err
	}
	for i, b := range batch {
		firsts[i] = map[string]int{}
		groups[i].Code = b.Code
		for j, p := range b.Promised {
			if skip[i][j] {
				continue
			}
			if _, dup := firsts[i][p.Claim.OrderID]; !dup {
				firsts[i][p.Claim.OrderID] = len(groups[i].Records)
				groups[i].Records = append(groups[i].Records, p)
			}
		}
	}
	res, err := l.insertLogged(ctx, groups)
	if err != nil {
		return nil, err
	}
	outs := make([][]store.Written, len(batch))
	for i, b := range batch {
		outs[i] = make([]store.Written, len(b.Claims))
		seen := map[string]bool{}
		for j, cl := range b.Claims {
			if skip[i][j] {
				outs[i][j] = store.Written{Err: errAbandoned}
				continue
			}
			lead := res[i][firsts[i][cl.OrderID]]
			switch {
			case !seen[cl.OrderID]:
				outs[i][j] = lead
			case lead.Err == nil:
				outs[i][j] = store.Written{Reservation: lead.Reservation, Err: store.RetryAnswer(lead.Reservation, b.Code, cl), Replayed: true}
			default:
				outs[i][j] = lead
			}
			seen[cl.OrderID] = true
		}
	}
	return outs, nil
}

// errAbandoned marks a record the consumer skips: its promise was abandoned
// (its produce reported a failure, its use was given back, its client was
// answered 503), yet the broker kept it.
var errAbandoned = errors.New("the admission's promise was abandoned: its record is skipped")

// abandonedOf reads, per promised record of each batch, whether its promise
// was abandoned (gate.Abandoned), and in the same step logs the promises of
// the others, so that a failed produce's abandon can no longer give their
// uses back while their rows are written. Redis unreadable: a fault, the
// batch is written again later.
func (l *Ledger) abandonedOf(ctx context.Context, batch []Batch) ([][]bool, error) {
	skip := make([][]bool, len(batch))
	if l.gate == nil {
		return skip, nil
	}
	for i, b := range batch {
		recs := make([]gate.Record, len(b.Promised))
		for j, p := range b.Promised {
			recs[j] = gate.Record{OrderID: p.Claim.OrderID, AdmittedAt: p.AdmittedAt}
		}
		ab, err := l.gate.Abandoned(ctx, b.Code, recs)
		if err != nil {
			return nil, fmt.Errorf("read the abandoned promises of %s: %w: %w", b.Code, err, voucher.ErrUnavailable)
		}
		skip[i] = ab
		if n := countTrue(ab); n > 0 {
			l.log.Warn("records of abandoned promises skipped: the broker kept them after their produce failed",
				"code", b.Code, "records", n)
		}
	}
	return skip, nil
}

func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// insertLogged is store.InsertLogged, split until each refusal is alone.
func (l *Ledger) insertLogged(ctx context.Context, groups []store.LoggedGroup) ([][]store.Written, error) {
	out, refused, err := l.store.InsertLogged(ctx, groups)
	if err != nil || refused == nil {
		return out, err
	}
	if len(groups) > 1 {
		out = make([][]store.Written, len(groups))
		for i, g := range groups {
			o, err := l.insertLogged(ctx, []store.LoggedGroup{g})
			if err != nil {
				return nil, err
			}
			out[i] = o[0]
		}
		return out, nil
	}
	g := groups[0]
	if len(g.Records) == 1 {
		return [][]store.Written{{{Err: refused}}}, nil
	}
	mid := len(g.Records) / 2
	first, err := l.insertLogged(ctx, []store.LoggedGroup{{Code: g.Code, Records: g.Records[:mid]}})
	if err != nil {
		return nil, err
	}
	second, err := l.insertLogged(ctx, []store.LoggedGroup{{Code: g.Code, Records: g.Records[mid:]}})
	if err != nil {
		return nil, err
	}
	return [][]store.Written{append(first[0], second[0]...)}, nil
}

// settleLogged tells Redis what the database decided of voucher code's
// logged claims (out): their promises are removed, a row that holds a use is
// held, a refused claim's use is given back (dropped for out of stock); it
// returns the refusals.
func (l *Ledger) settleLogged(ctx context.Context, b Batch, out []store.Written) ([]Refusal, error) {
	code, claims := b.Code, b.Claims
	var refused []Refusal
	var givenBack, dropped []string
	var decided []gate.Record
	var holding []gate.Order
	for i, w := range out {
		cl := claims[i]
		rec := gate.Record{OrderID: cl.OrderID}
		if len(b.Promised) == len(claims) {
			rec.AdmittedAt = b.Promised[i].AdmittedAt
		}
		decided = append(decided, rec)
		own := w.Reservation.VoucherCode == code && w.Reservation.CustomerID == cl.CustomerID
		if w.Reservation.Status.Active() && own {
			holding = append(holding, gate.Order{OrderID: w.Reservation.OrderID, CustomerID: w.Reservation.CustomerID})
		}
		switch {
		case errors.Is(w.Err, errAbandoned):
			// Skipped: its use was given back when its produce failed.
		case w.Err == nil:
		case w.Replayed && own:
			// This order's own row, written by an earlier delivery of this
			// record or by a retry: nothing to write, nothing to give back
			// (a row that gave its use back gave it in Redis too).
		case voucher.ErrorCode(w.Err) == voucher.CodeOutOfStock:
			dropped = append(dropped, cl.OrderID) // Redis counted one too many: see Ledger.WriteAdmittedMany
			refused = append(refused, Refusal{Code: code, Claim: cl, Reason: voucher.CodeOutOfStock, Err: w.Err})
		default:
			givenBack = append(givenBack, cl.OrderID)
			refused = append(refused, Refusal{Code: code, Claim: cl, Reason: reasonOf(w.Err), Err: w.Err})
		}
	}
	if l.gate == nil {
		return refused, nil
	}
	l.reassert(ctx, code, holding)
	bg := context.WithoutCancel(ctx)
	// The rows are committed (or the records refused): the promises go
	// first, so that the give-backs below, which skip promised orders, act.
	if err := l.gate.Settle(bg, code, decided); err != nil {
		return nil, fmt.Errorf("remove %d promises of %s: %w", len(decided), code, err)
	}
	var freed []string
	for i, w := range out {
		if !errors.Is(w.Err, errAbandoned) {
			freed = append(freed, claims[i].OrderID)
		}
	}
	l.freeOrders(bg, code, freed)
	if _, err := l.gate.GiveBack(bg, code, givenBack...); err != nil {
		return nil, fmt.Errorf("give back %d refused admissions of %s: %w", len(givenBack), code, err)
	}
	if _, err := l.gate.Drop(bg, code, dropped...); err != nil {
		return nil, fmt.Errorf("drop %d admissions of %s refused as out of stock: %w", len(dropped), code, err)
	}
	return refused, nil
}

// reasonOf is the dead-letter reason of a refused logged admission: the
// refusal's error code, or REJECTED for a row the database refused with no
// answer mapped (store.ErrRejected).
func reasonOf(err error) string {
	if errors.Is(err, store.ErrRejected) {
		return store.ReasonRejected
	}
	return voucher.ErrorCode(err)
}
