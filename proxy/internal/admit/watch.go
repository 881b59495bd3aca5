package admit

import (
	"context"
	"log/slog"

	"github.com/flashgate/flashgate/shared/gate"
)

// WatchChanges makes the admitter forget a voucher's terms and sold-out flag
// as soon as the ledger publishes that it changed (new terms, a pause, stock
// coming back), until the returned stop is called; stop waits for the watcher
// to end. A watcher that missed messages falls back to the caches' TTLs. The
// set of voucher codes syncs with it on a miss (codes.Set.Has); so may a
// caller that must see every change published before it (w.Sync).
func (a *Admitter) WatchChanges(ctx context.Context, sub gate.Subscriber, log *slog.Logger) (w *gate.Watcher, stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	w = gate.NewWatcher(sub, a.forget, log)
	a.codes.SyncWith(w.Sync)
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	return w, func() {
		cancel()
		<-done
	}
}
