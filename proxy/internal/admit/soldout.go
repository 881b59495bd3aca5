package admit

import "context"

// soldOutFlag marks a voucher sold out. passes are the orders Redis knew when
// the flag was set, holding a use or finished (released, expired, refunded):
// their retries still go through to the script and the ledger (a held order
// gets its 201, a finished one its RESERVATION_RELEASED or _REFUNDED);
// everyone else gets OUT_OF_STOCK at once. An order admitted elsewhere after
// the flag was set is not in passes: the stock that let it in came back with a
// change published to every proxy, which dropped the flag (forget).
type soldOutFlag struct {
	passes map[string]struct{}
}

// flagged reports whether the sold-out flag answers for this order.
func (a *Admitter) flagged(code, orderID string) bool {
	set, passes := a.flagFor(code, orderID)
	return set && !passes
}

// flagFor reports whether this proxy holds code sold out, and if so whether
// the flag passes orderID through (an order Redis knew when it was set).
func (a *Admitter) flagFor(code, orderID string) (set, passes bool) {
	f, ok := a.soldOut.Get(code)
	if !ok {
		return false, false
	}
	_, passes = f.passes[orderID]
	return true, passes
}

// KnownToFlag reports whether this proxy holds the voucher sold out and its
// flag knows orderID: the order held its use or had finished in Redis when the
// flag was set, whichever proxy admitted it, so its retry takes nothing new.
func (a *Admitter) KnownToFlag(code, orderID string) bool {
	set, passes := a.flagFor(code, orderID)
	return set && passes
}

// flagSoldOut sets the sold-out flag, with the orders Redis knows now (holding
// a use or finished) so that their retries are still answered from their own
// state. One caller per voucher does the work; a failure only leaves the flag
// unset (it is a hint).
func (a *Admitter) flagSoldOut(code string) {
	if _, ok := a.soldOut.Get(code); ok {
		return
	}
	_, _, _ = a.soldOutFlight.Do(code, func() (any, error) {
		epoch := a.currentEpoch()
		ctx, cancel := context.WithTimeout(a.base, a.cfg.RedisTimeout)
		defer cancel()
		st, loaded, err := a.gate.State(ctx, code)
		if err != nil || !loaded || st.Remaining > 0 {
			return nil, err
		}
		f := &soldOutFlag{passes: make(map[string]struct{}, len(st.Orders)+len(st.Finished))}
		for _, o := range st.Orders {
			f.passes[o.OrderID] = struct{}{}
		}
		for _, id := range st.Finished {
			f.passes[id] = struct{}{}
		}
		a.setIfCurrent(epoch, func() {
			a.soldOut.SetWithTTL(code, f, 1, a.cfg.SoldOutTTL)
			a.soldOut.Wait()
		})
		return nil, nil
	})
}

// Unflag drops the sold-out flag of a voucher, as when a release or refund
// passed through this proxy and gave a use back.
func (a *Admitter) Unflag(code string) {
	a.forgetMu.Lock()
	defer a.forgetMu.Unlock()
	a.epoch++
	a.soldOut.Del(code)
}

// forget drops a voucher's sold-out flag and cached terms, so that the next
// request reads both again: the ledger published that the voucher changed
// (new terms, a pause, stock coming back). It is gate.WatchChanges's onChange.
func (a *Admitter) forget(code string) {
	a.forgetMu.Lock()
	defer a.forgetMu.Unlock()
	a.epoch++
	a.soldOut.Del(code)
	a.vouchers.Del(code)
	a.codes.Add(code)
}

func (a *Admitter) currentEpoch() uint64 {
	a.forgetMu.Lock()
	defer a.forgetMu.Unlock()
	return a.epoch
}

// setIfCurrent runs set (a cache write from a read begun at epoch) unless a
// forget or Unflag came since: that read may predate the change.
func (a *Admitter) setIfCurrent(epoch uint64, set func()) {
	a.forgetMu.Lock()
	defer a.forgetMu.Unlock()
	if a.epoch == epoch {
		set()
	}
}

// SoldOut reports whether this proxy holds code sold out: its flag answers
// a new order OUT_OF_STOCK without asking Redis (KnownToFlag names the orders
// it still lets through).
func (a *Admitter) SoldOut(code string) bool {
	_, ok := a.soldOut.Get(code)
	return ok
}
