// Package events is what a receiver of flashgate's events needs: the event as
// it is sent (webhooks, Kafka, GET /admin/events), its types, and the check of
// a webhook's Flashgate-Signature header. The ledger signs with Sign; a
// receiver verifies with VerifySignature before it trusts a body.
package events

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The event types.
const (
	ReservationReserved  = "reservation.reserved"
	ReservationConfirmed = "reservation.confirmed"
	ReservationReleased  = "reservation.released" // data.reason: CANCELLED (DELETE) or EXPIRED (the sweeper)
	ReservationRefunded  = "reservation.refunded"
	VoucherCreated       = "voucher.created"
	VoucherUpdated       = "voucher.updated"
	VoucherPaused        = "voucher.paused"
	VoucherResumed       = "voucher.resumed"
	VoucherSoldOut       = "voucher.sold_out" // used_count reached total_limit
)

// Types lists every event type.
var Types = []string{
	ReservationReserved, ReservationConfirmed, ReservationReleased, ReservationRefunded,
	VoucherCreated, VoucherUpdated, VoucherPaused, VoucherResumed, VoucherSoldOut,
}

// Event is one state change. ID is unique and, per voucher, increasing in the
// order the changes committed; a sink delivers at least once, so a receiver
// deduplicates by ID.
type Event struct {
	ID          int64           `json:"id"`
	Type        string          `json:"type"`
	OccurredAt  time.Time       `json:"occurredAt"` // the database's clock, at the change's transaction
	VoucherCode string          `json:"voucherCode"`
	Data        json.RawMessage `json:"data"`
}

// SignatureHeader carries a webhook's signature: t=<unix seconds>,v1=<hex
// HMAC-SHA256 of "<t>.<body>" keyed with WEBHOOK_SECRET>.
const SignatureHeader = "Flashgate-Signature"

// Sign returns the SignatureHeader value for body sent at t.
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// The reasons VerifySignature refuses a body.
var (
	ErrMalformedSignature = errors.New("malformed " + SignatureHeader + " header")
	ErrBadSignature       = errors.New("signature does not match the body")
	ErrStaleSignature     = errors.New("signature timestamp outside the tolerance")
)

// VerifySignature checks header (the SignatureHeader value) against body and
// secret, and refuses a timestamp more than tolerance away from now (a replay);
// tolerance 0 skips that check. Several v1 entries may be present (while a
// secret is rotated): one match is enough.
func VerifySignature(secret, header string, body []byte, tolerance time.Duration) error {
	return verifyAt(secret, header, body, tolerance, time.Now())
}

func verifyAt(secret, header string, body []byte, tolerance time.Duration, now time.Time) error {
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return ErrMalformedSignature
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			sig, err := hex.DecodeString(v)
			if err != nil {
				return ErrMalformedSignature
			}
			sigs = append(sigs, sig)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return ErrMalformedSignature
	}
	if tolerance > 0 {
		if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
			return fmt.Errorf("%w: signed %s ago, tolerance %s", ErrStaleSignature, d.Round(time.Second), tolerance)
		}
	}
	want := mac(secret, ts, body)
	for _, sig := range sigs {
		if hmac.Equal(sig, want) {
			return nil
		}
	}
	return ErrBadSignature
}
