package voucher

import "time"

// VoucherPatch is the body of PATCH /admin/vouchers/{code}: any subset of the
// terms that may change during a sale. Code and FlashSale are decoded only to
// be refused by name: a voucher's identity and its path never change.
type VoucherPatch struct {
	Code           *string    `json:"code"`
	FlashSale      *bool      `json:"flashSale"`
	TotalLimit     *int       `json:"totalLimit"`
	PerUserLimit   *int       `json:"perUserLimit"`
	MinOrderAmount *int64     `json:"minOrderAmount"`
	DiscountAmount *int64     `json:"discountAmount"`
	StartsAt       *time.Time `json:"startsAt"`
	EndsAt         *time.Time `json:"endsAt"`

	RequireCheckoutToken *bool   `json:"requireCheckoutToken"`
	HoldTTL              *string `json:"holdTtl"` // affects reservations made after the change only
	// WritePath changes only while the voucher is not live (the database
	// refuses it with WRITE_PATH_LIVE): pause it first.
	WritePath *string `json:"writePath"`
}

// Apply checks the patch and returns v with it applied (counters untouched).
// Whether totalLimit stays at or above the uses held is the database's to say
// (LIMIT_BELOW_USED), under the voucher's row lock.
func (p VoucherPatch) Apply(v Voucher) (Voucher, error) {
	switch {
	case p.Code != nil:
		return Voucher{}, invalid("code cannot change")
	case p.FlashSale != nil:
		return Voucher{}, invalid("flashSale cannot change")
	case p.TotalLimit == nil && p.PerUserLimit == nil && p.MinOrderAmount == nil &&
		p.DiscountAmount == nil && p.StartsAt == nil && p.EndsAt == nil &&
		p.RequireCheckoutToken == nil && p.HoldTTL == nil && p.WritePath == nil:
		return Voucher{}, invalid("the body must change at least one of totalLimit, perUserLimit, " +
			"minOrderAmount, discountAmount, startsAt, endsAt, requireCheckoutToken, holdTtl, writePath")
	case p.TotalLimit != nil && (*p.TotalLimit < 0 || *p.TotalLimit > MaxTotalLimit):
		return Voucher{}, invalid("totalLimit must be between 0 and %d", MaxTotalLimit)
	case p.PerUserLimit != nil && (*p.PerUserLimit < 1 || *p.PerUserLimit > MaxPerUserLimit):
		return Voucher{}, invalid("perUserLimit must be between 1 and %d", MaxPerUserLimit)
	case p.MinOrderAmount != nil && (*p.MinOrderAmount < 0 || *p.MinOrderAmount > MaxAmount):
		return Voucher{}, invalid("minOrderAmount must be a non-negative integer up to %d", MaxAmount)
	case p.DiscountAmount != nil && (*p.DiscountAmount <= 0 || *p.DiscountAmount > MaxAmount):
		return Voucher{}, invalid("discountAmount must be a positive integer up to %d", MaxAmount)
	}
	if p.HoldTTL != nil {
		hold, err := ParseHoldTTL(p.HoldTTL)
		if err != nil {
			return Voucher{}, err
		}
		v.HoldTTL = hold
	}
	if p.WritePath != nil {
		path, err := ParseWritePath(p.WritePath, v.WritePath)
		if err != nil {
			return Voucher{}, err
		}
		if path == WritePathLog && !v.FlashSale {
			return Voucher{}, ErrLogNeedsFlash
		}
		v.WritePath = path
	}
	set(&v.RequireCheckoutToken, p.RequireCheckoutToken)
	set(&v.TotalLimit, p.TotalLimit)
	set(&v.PerUserLimit, p.PerUserLimit)
	set(&v.MinOrderAmount, p.MinOrderAmount)
	set(&v.DiscountAmount, p.DiscountAmount)
	if p.StartsAt != nil {
		v.StartsAt = p.StartsAt.UTC()
	}
	if p.EndsAt != nil {
		v.EndsAt = p.EndsAt.UTC()
	}
	switch {
	case v.StartsAt.Year() < 1 || v.EndsAt.Year() > 9999:
		return Voucher{}, invalid("startsAt and endsAt must be within years 0001 to 9999 in UTC")
	case !v.StartsAt.Before(v.EndsAt):
		return Voucher{}, invalid("startsAt must be before endsAt")
	}
	return v, nil
}

func set[T any](dst *T, src *T) {
	if src != nil {
		*dst = *src
	}
}
