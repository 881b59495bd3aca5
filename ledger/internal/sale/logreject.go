package sale

import (
	"context"
	"fmt"
)

// GiveBackLogged gives back the Redis uses of logged admissions of code that
// the database rejected outright (a constraint no answer maps: see
// admissions.ReasonRejected): they will have no row.
func (l *Ledger) GiveBackLogged(ctx context.Context, code string, orderIDs []string) error {
	if l.gate == nil || len(orderIDs) == 0 {
		return nil
	}
	if _, err := l.gate.GiveBack(context.WithoutCancel(ctx), code, orderIDs...); err != nil {
		return fmt.Errorf("give back %d rejected admissions of %s: %w", len(orderIDs), code, err)
	}
	return nil
}
