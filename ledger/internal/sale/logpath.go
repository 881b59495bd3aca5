package sale

import (
	"context"
	"fmt"
	"time"

	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/voucher"
)

// AdmissionLog makes admissions durable in the admissions log (the article's
// Approach B, for vouchers whose writePath is log): Append returns once the
// broker acknowledged or refused each claim, with nil or the error of each.
// An error means the record is not in the log.
type AdmissionLog interface {
	Append(ctx context.Context, code string, claims []voucher.Claim) []error
}

// UseLog sends the admitted writes of log vouchers to a (before the ledger
// serves). Without one, they answer 503 and give their uses back.
func (l *Ledger) UseLog(a AdmissionLog) { l.admissions = a }

// ErrNoLog answers the admitted writes of a log voucher on a ledger without
// KAFKA_ADMISSIONS_BROKERS.
var ErrNoLog = fmt.Errorf("writePath log needs Kafka (KAFKA_ADMISSIONS_BROKERS): %w", voucher.ErrUnavailable)

// appendAdmitted is WriteAdmittedMany for voucher v whose writePath is log:
// retries of orders that have a row are answered from it, as the group commit
// answers them; the others are produced to the admissions log and answered
// once the broker acknowledged them (the consumer writes their rows). A claim
// the log did not take gets its use back in Redis and a 503: never a 201
// without a durable record.
func (l *Ledger) appendAdmitted(ctx context.Context, v voucher.Voucher, claims []voucher.Claim) []store.Written {
	code := v.Code
	out := make([]store.Written, len(claims))
	fresh := make([]int, 0, len(claims))
	// One indexed read, no lock: the voucher's row stays off the path. A
	// failed read sends every claim to the log, where the consumer answers
	// the retries among them from their rows.
	existing, found, err := l.store.ExistingMany(ctx, code, claims)
	var holding []gate.Order
	for i, cl := range claims {
		if err != nil || !found[i] {
			fresh = append(fresh, i)
			continue
		}
		out[i] = existing[i]
		if r := existing[i].Reservation; r.Status.Active() && r.VoucherCode == code && r.CustomerID == cl.CustomerID {
			holding = append(holding, gate.Order{OrderID: r.OrderID, CustomerID: r.CustomerID})
		}
	}
	l.reassert(ctx, code, holding)
	if len(fresh) == 0 {
		return out
	}
	batch := make([]voucher.Claim, len(fresh))
	ids := make([]string, len(fresh))
	for j, i := range fresh {
		batch[j], ids[j] = claims[i], claims[i].OrderID
	}
	var errs []error
	writing := l.settler.Writing(code, ids)
	if l.admissions != nil {
		errs = l.admissions.Append(ctx, code, batch)
	} else {
		errs = make([]error, len(batch))
		for j := range errs {
			errs[j] = ErrNoLog
		}
	}
	writing()
	now := l.store.Clock()
	var givenBack []string
	for j, i := range fresh {
		cl := claims[i]
		if errs[j] != nil {
			out[i].Err = fmt.Errorf("append %s/%s: %w: %w", code, cl.OrderID, errs[j], voucher.ErrUnavailable)
			givenBack = append(givenBack, cl.OrderID)
			continue
		}
		// The row the consumer will write, as the 201 needs it.
		out[i].Reservation = voucher.Reservation{OrderID: cl.OrderID, CustomerID: cl.CustomerID, VoucherCode: code,
			Status: voucher.Reserved, DiscountAmount: v.DiscountFor(cl.OrderAmount), CreatedAt: now}
	}
	if len(givenBack) > 0 && l.gate != nil {
		if _, err := l.gate.GiveBack(context.WithoutCancel(ctx), code, givenBack...); err != nil {
			l.log.Error("give back after a failed append to the admissions log", "code", code, "orders", len(givenBack), "err", err)
		}
	}
	return out
}

// Refusal is an admission from the log that the database refused for good
// (a guard fired: stock, the customer's limit, the order taken by another
// voucher or customer, the voucher's window): it goes to the dead-letter
// topic, and its Redis use was given back.
type Refusal struct {
	Code   string // the voucher
	Claim  voucher.Claim
	Reason string // the refusal's error code, such as OUT_OF_STOCK
	Err    error
}

// WriteLogged writes admissions read from the log, of one or several
// vouchers (one Batch each), in one transaction (Writer.WriteBatches: the
// vouchers' rows locked in code order; voucher by voucher, splitting, when a
// guard fires, as the synchronous path does), idempotent by orderId: an
// admission whose order already has its own row (a redelivery) changes
// nothing. It returns the refused ones, whose uses it gave back in Redis; an
// error is a fault (the database could not tell): nothing was decided and
// the whole batch must be written again.
func (l *Ledger) WriteLogged(ctx context.Context, batch []Batch) ([]Refusal, error) {
	writing := make([]func(), len(batch))
	for i, b := range batch {
		ids := make([]string, len(b.Claims))
		for j, cl := range b.Claims {
			ids[j] = cl.OrderID
		}
		writing[i] = l.settler.Writing(b.Code, ids)
	}
	outs, err := l.writer.WriteBatches(ctx, batch)
	for _, done := range writing {
		done()
	}
	if err != nil {
		return nil, fmt.Errorf("write the logged admissions of %d vouchers: %w", len(batch), err)
	}
	for i, b := range batch {
		for j := range outs[i] {
			if voucher.IsFault(outs[i][j].Err) {
				return nil, fmt.Errorf("write logged admission %s/%s: %w", b.Code, b.Claims[j].OrderID, outs[i][j].Err)
			}
		}
	}
	var refused []Refusal
	for i, b := range batch {
		r, err := l.settleLogged(ctx, b.Code, b.Claims, outs[i])
		if err != nil {
			return nil, err
		}
		refused = append(refused, r...)
	}
	return refused, nil
}

// settleLogged tells Redis what the database decided of voucher code's
// logged claims (out): a row that holds a use is held, a refused claim's use
// is given back (dropped for out of stock); it returns the refusals.
func (l *Ledger) settleLogged(ctx context.Context, code string, claims []voucher.Claim, out []store.Written) ([]Refusal, error) {
	var refused []Refusal
	var givenBack, dropped []string
	var holding []gate.Order
	for i, w := range out {
		cl := claims[i]
		own := w.Reservation.VoucherCode == code && w.Reservation.CustomerID == cl.CustomerID
		if w.Reservation.Status.Active() && own {
			holding = append(holding, gate.Order{OrderID: w.Reservation.OrderID, CustomerID: w.Reservation.CustomerID})
		}
		switch {
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
			refused = append(refused, Refusal{Code: code, Claim: cl, Reason: voucher.ErrorCode(w.Err), Err: w.Err})
		}
	}
	if l.gate == nil {
		return refused, nil
	}
	l.reassert(ctx, code, holding)
	bg := context.WithoutCancel(ctx)
	if _, err := l.gate.GiveBack(bg, code, givenBack...); err != nil {
		return nil, fmt.Errorf("give back %d refused admissions of %s: %w", len(givenBack), code, err)
	}
	if _, err := l.gate.Drop(bg, code, dropped...); err != nil {
		return nil, fmt.Errorf("drop %d admissions of %s refused as out of stock: %w", len(dropped), code, err)
	}
	return refused, nil
}

// LogWait bounds how long a read or a change of one order waits for its
// row while the order's admission is still in the admissions log.
const LogWait = 3 * time.Second

// logPoll is how often such a wait reads again.
const logPoll = 20 * time.Millisecond

// errStillInLog answers an order answered 201 whose row the consumer has not
// written within LogWait: a 503 with Retry-After, never a 404.
var errStillInLog = voucher.Errorf(voucher.CodeUnavailable,
	"the reservation is still being written (the admissions log is behind): retry shortly")

// awaitLogged runs op (a read or a change of orderID) and, while it finds no
// row of the order of a log voucher whose use Redis holds (its admission
// was answered 201 and its record is still in the log), runs it again until
// the row appears, LogWait has passed (errStillInLog) or ctx ends. Any other
// answer is op's own.
func (l *Ledger) awaitLogged(ctx context.Context, code, orderID string, op func() error) error {
	err := op()
	if voucher.ErrorCode(err) != voucher.CodeReservationNotFound || l.gate == nil {
		return err
	}
	v, terr := l.store.Terms(ctx, code)
	if terr != nil || v.WritePath != voucher.WritePathLog {
		return err
	}
	deadline := time.Now().Add(LogWait)
	for {
		_, held, herr := l.gate.Holder(ctx, code, orderID)
		if herr != nil {
			return fmt.Errorf("is order %s/%s in the log: %w: %w", code, orderID, herr, voucher.ErrUnavailable)
		}
		if !held {
			// Not admitted, or given back: no row is coming, unless it
			// committed between the two reads (then this read finds it).
			return op()
		}
		if time.Now().After(deadline) {
			return errStillInLog
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for order %s/%s in the log: %w: %w", code, orderID, ctx.Err(), voucher.ErrUnavailable)
		case <-time.After(logPoll):
		}
		if err = op(); voucher.ErrorCode(err) != voucher.CodeReservationNotFound {
			return err
		}
	}
}
