package api

import (
	"fmt"
	"time"
)

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

// VoucherCodesPage is the most codes one page of VoucherCodesPath holds: at
// 32 characters a code, a page stays under 400 KB, and 100,000 vouchers are
// ten requests, each one index-only scan of the primary key.
const VoucherCodesPage = 10_000

// VoucherCodes is one page of GET VoucherCodesPath.
type VoucherCodes struct {
	Codes []string `json:"codes"`
	// Next is the after= of the next page: the page's last code; nil on the
	// last page.
	Next *string `json:"next"`
}
