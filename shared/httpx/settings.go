package httpx

import (
	"fmt"
	"time"
)

// SettingsPath is the ledger's internal route (token-protected) that tells a
// proxy the ledger settings its own must agree with.
const SettingsPath = InternalPrefix + "/settings"

// LedgerSettings is the body of GET SettingsPath. Durations are written as Go
// durations ("30s").
type LedgerSettings struct {
	// HangingGrace is the ledger's HANGING_GRACE: an admission younger than
	// this may still be on its way to the database, so the reconciler leaves
	// its Redis hold alone. A proxy's LEDGER_TIMEOUT must stay below it.
	HangingGrace string `json:"hangingGrace"`
}

// NewLedgerSettings writes a ledger's settings.
func NewLedgerSettings(hangingGrace time.Duration) LedgerSettings {
	return LedgerSettings{HangingGrace: hangingGrace.String()}
}

// Grace reads HangingGrace back.
func (s LedgerSettings) Grace() (time.Duration, error) {
	d, err := time.ParseDuration(s.HangingGrace)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("hangingGrace %q is not a positive duration", s.HangingGrace)
	}
	return d, nil
}
