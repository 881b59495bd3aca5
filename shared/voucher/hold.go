package voucher

import (
	"encoding/json"
	"fmt"
	"time"
)

// MinHoldTTL is the shortest hold a voucher may set: shorter, a customer
// could not pay before the sweeper gave the use away.
const MinHoldTTL = time.Second

// MaxHoldTTL bounds a voucher's hold (a week): a use held longer is a use
// the sale never sells.
const MaxHoldTTL = 7 * 24 * time.Hour

// Duration is a time.Duration that JSON carries as a Go duration string
// ("3m0s"), as holdTtl is written on create and PATCH.
type Duration time.Duration

// MarshalJSON writes d as its Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"3m\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// ParseHoldTTL reads holdTtl as a create or a PATCH writes it: nil is no
// hold of its own (0: the ledger's RESERVATION_TTL); otherwise a Go duration
// string from MinHoldTTL to MaxHoldTTL, or INVALID_REQUEST naming holdTtl.
func ParseHoldTTL(s *string) (Duration, error) {
	if s == nil {
		return 0, nil
	}
	d, err := time.ParseDuration(*s)
	switch {
	case err != nil:
		return 0, invalid("holdTtl must be a duration such as \"3m\" or \"90s\"")
	case d < MinHoldTTL || d > MaxHoldTTL:
		return 0, invalid("holdTtl must be between %s and %s", MinHoldTTL, MaxHoldTTL)
	}
	return Duration(d), nil
}

// Hold is how long a new reservation of v holds its use: its HoldTTL, else
// fallback (the ledger's RESERVATION_TTL).
func (v Voucher) Hold(fallback time.Duration) time.Duration {
	if v.HoldTTL > 0 {
		return time.Duration(v.HoldTTL)
	}
	return fallback
}
