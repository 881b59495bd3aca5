package sale

import (
	"context"
	"fmt"
	"time"

	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/voucher"
)

// AdmissionLog makes admissions durable in the admissions log (the article's
// Approach B, for vouchers whose writePath is log): Append returns once the
// broker acknowledged or refused each promised claim, with nil or the error
// of each. An error means the record is not in the log.
type AdmissionLog interface {
	Append(ctx context.Context, code string, promised []store.Logged) []error
}

// UseLog sends the admitted writes of log vouchers to a (before the ledger
// serves). Without one, they answer 503 and give their uses back.
func (l *Ledger) UseLog(a AdmissionLog) { l.admissions = a }

// errNoLog answers the admitted writes of a log voucher on a ledger without
// KAFKA_ADMISSIONS_BROKERS.
var errNoLog = fmt.Errorf("writePath log needs Kafka (KAFKA_ADMISSIONS_BROKERS): %w", voucher.ErrUnavailable)

// appendAdmitted is WriteAdmittedMany for voucher v whose writePath is log.
// Every claim is answered from the truth: an order that has a row from its
// row; one whose record is in the log from its promise in Redis (the 201 it
// got, replayed, or ORDER_CONFLICT for another customer or amount, as the
// row would answer); a new one is promised, produced to the admissions log
// and answered 201 once the broker acknowledged it. When the truth cannot be
// read, 503: never a 201 without a durable record, never a second record of
// one order.
func (l *Ledger) appendAdmitted(ctx context.Context, v voucher.Voucher, claims []voucher.Claim) []store.Written {
	code := v.Code
	out := make([]store.Written, len(claims))
	if l.gate == nil {
		for i := range out {
			out[i].Err = ErrNoGate
		}
		return out
	}
	// One indexed read, no lock: the voucher's row stays off the path.
	fresh, err := l.answerFromRows(ctx, code, claims, out, nil)
	if err != nil {
		l.unreadable(ctx, code, claims, out, fresh, err)
		return out
	}
	lead, followers := distinct(claims, fresh)
	defer answerFollowers(code, claims, out, followers) // once the lead's answer is final
	produce := l.promise(ctx, v, claims, out, lead)
	if len(produce) == 0 {
		return out
	}
	batch := make([]store.Logged, len(produce))
	ids := make([]string, len(produce))
	for j, p := range produce {
		batch[j], ids[j] = p.rec, p.rec.Claim.OrderID
	}
	var errs []error
	writing := l.settler.writing(code, ids)
	if l.admissions != nil {
		errs = l.admissions.Append(ctx, code, batch)
	} else {
		errs = make([]error, len(batch))
		for j := range errs {
			errs[j] = errNoLog
		}
	}
	writing()
	var logged, failed []string
	for j, p := range produce {
		id := p.rec.Claim.OrderID
		switch {
		case errs[j] == nil:
			logged = append(logged, id)
		case p.retaken:
			// The first produce's record may be in the log: the promise
			// stays, and the next retry takes it over again.
			out[p.i] = store.Written{Err: fmt.Errorf("append %s/%s again: %w: %w", code, id, errs[j], voucher.ErrUnavailable)}
		default:
			out[p.i] = store.Written{Err: fmt.Errorf("append %s/%s: %w: %w", code, id, errs[j], voucher.ErrUnavailable)}
			failed = append(failed, id)
		}
	}
	bg := context.WithoutCancel(ctx)
	if err := l.gate.MarkLogged(bg, code, logged...); err != nil {
		// The records are in the log: their promises stay pending (their
		// retries answer 503, or take them over) until the consumer writes
		// their rows.
		l.log.Error("promises not marked logged", "code", code, "orders", len(logged), "err", err)
	}
	l.abandon(bg, code, failed)
	return out
}

// logWait bounds how long a read or a change of one order waits for its
// row while the order's admission is still in the admissions log.
const logWait = 3 * time.Second

// logPoll is how often such a wait reads again.
const logPoll = 20 * time.Millisecond

// errStillInLog answers an order answered 201 whose row the consumer has not
// written within LogWait: a 503 with Retry-After, never a 404.
var errStillInLog = voucher.Errorf(voucher.CodeUnavailable,
	"the reservation is still being written (the admissions log is behind): retry shortly")

// awaitLogged runs op (a read or a change of orderID) and, while it finds no
// row of the order of a log voucher whose record is still in the log (its
// promise is in Redis, or, for a record produced before promises, Redis
// holds its use), waits for the row until it appears, LogWait has passed
// (errStillInLog) or ctx ends. While the promise stands it reads only the
// promise, not op's transaction again. Any other answer is op's own.
func (l *Ledger) awaitLogged(ctx context.Context, code, orderID string, op func() error) error {
	err := op()
	if voucher.ErrorCode(err) != voucher.CodeReservationNotFound || l.gate == nil {
		return err
	}
	v, terr := l.store.Terms(ctx, code)
	if terr != nil || v.WritePath != voucher.WritePathLog {
		return err
	}
	deadline := time.Now().Add(logWait)
	for {
		_, promised, perr := l.gate.Promises(ctx, code, orderID)
		if perr != nil {
			return fmt.Errorf("is order %s/%s in the log: %w: %w", code, orderID, perr, voucher.ErrUnavailable)
		}
		if !promised[0] {
			_, held, herr := l.gate.Holder(ctx, code, orderID)
			if herr != nil {
				return fmt.Errorf("is order %s/%s in the log: %w: %w", code, orderID, herr, voucher.ErrUnavailable)
			}
			// Not held: not admitted, or given back, so no row is coming
			// unless it committed meanwhile (then this read finds it).
			if err = op(); !held || voucher.ErrorCode(err) != voucher.CodeReservationNotFound {
				return err
			}
		}
		if time.Now().After(deadline) {
			return errStillInLog
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for order %s/%s in the log: %w: %w", code, orderID, ctx.Err(), voucher.ErrUnavailable)
		case <-time.After(logPoll):
		}
	}
}
