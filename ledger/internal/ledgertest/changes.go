package ledgertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/gate"
)

// Subscribe listens on the change channel and returns the codes announced.
func Subscribe(tb testing.TB, l *Ledger) <-chan string {
	tb.Helper()
	sub, ok := l.Pub.(gate.Subscriber)
	require.True(tb, ok, "the test ledger's publisher is a redis client")
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	ps := sub.Subscribe(ctx, gate.ChangesChannel)
	_, err := ps.Receive(ctx) // the subscription is live before anything is published
	require.NoError(tb, err)
	tb.Cleanup(func() { ps.Close() })
	codes := make(chan string, 100)
	go func() {
		for m := range ps.Channel() {
			codes <- m.Payload
		}
	}()
	return codes
}

// Announced waits for code on codes.
func Announced(tb testing.TB, codes <-chan string, code string) {
	tb.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case c := <-codes:
			if c == code {
				return
			}
		case <-deadline:
			tb.Fatalf("no change of %s was published", code)
		}
	}
}
