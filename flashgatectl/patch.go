package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/flashgate/flashgate/shared/voucher"
)

// change is one term a patch moves, as the dry run and the confirmation show it.
type change struct {
	Field  string `json:"field"`
	Before string `json:"before"`
	After  string `json:"after"`
}

// dryRun is what patch --dry-run prints: the voucher now and as the patch
// would leave it. The ledger decides under the voucher's lock; a change made
// in between (uses taken meanwhile) may still make it refuse.
type dryRun struct {
	DryRun  bool            `json:"dryRun"`
	Before  voucher.Voucher `json:"before"`
	After   voucher.Voucher `json:"after"`
	Changes []change        `json:"changes"`
}

func (a *app) vouchersPatch() *cobra.Command {
	var pf patchFlags
	var yes, dry bool
	cmd := &cobra.Command{
		Use:   "patch CODE",
		Short: "Change a voucher's terms (only the flags given); --dry-run shows what would change",
		Long: `Change a voucher's terms: only the flags given change. A raised --total sells
at once; a --total below the uses held is refused (LIMIT_BELOW_USED). A new
--discount applies to new reservations only. To end a sale early, --ends-at now.

The voucher is read first and the change shown; without --yes you are asked
to type yes. --dry-run shows the change and sends nothing.`,
		Example: `  flashgatectl vouchers patch FLASH100 --total 1500 --ends-at +7d --dry-run
  flashgatectl vouchers patch FLASH100 --discount 50000 --yes`,
		Args:              exactArgs("CODE"),
		ValidArgsFunction: a.completeCode,
		RunE: func(cmd *cobra.Command, args []string) error {
			code := args[0]
			p, err := pf.patch(cmd, a.now())
			if err != nil {
				return err
			}
			c, ctx, cancel := a.client(cmd.Context())
			defer cancel()
			before, err := c.Voucher(ctx, code)
			if err != nil {
				return called(err)
			}
			after, changes, err := preview(before, p)
			if err != nil {
				// The ledger would answer the same refusal: say so without sending.
				return called(err)
			}
			if dry {
				d := dryRun{DryRun: true, Before: before, After: after, Changes: changes}
				return a.emit(d, func(w io.Writer) { changeRows(w, changes) })
			}
			if err := a.confirm(cmd.Context(), yes, fmt.Sprintf("Change %s: %s.", code, describe(changes))); err != nil {
				return err
			}
			v, err := c.UpdateVoucher(ctx, code, p)
			if err != nil {
				return called(err)
			}
			return a.emit(v, func(w io.Writer) { voucherFields(w, v) })
		},
	}
	pf.register(cmd)
	cmd.Flags().BoolVar(&dry, "dry-run", false, "show what would change and send nothing")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do it without asking")
	return cmd
}

// patchFlags are the terms patch may change, as typed.
type patchFlags struct {
	discount, minOrder     int64
	total, perUser         int
	startsAt, endsAt, hold string
	checkoutToken          bool
}

func (pf *patchFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.Int64Var(&pf.discount, "discount", 0, "discountAmount, for new reservations")
	f.Int64Var(&pf.minOrder, "min-order", 0, "minOrderAmount")
	f.IntVar(&pf.total, "total", 0, "totalLimit (not below the uses held)")
	f.IntVar(&pf.perUser, "per-user", 0, "perUserLimit")
	f.StringVar(&pf.startsAt, "starts-at", "", "startsAt: now, an offset such as +1h, or an RFC 3339 time")
	f.StringVar(&pf.endsAt, "ends-at", "", "endsAt: now, an offset such as +7d, or an RFC 3339 time")
	f.BoolVar(&pf.checkoutToken, "require-checkout-token", false, "reserves must carry a checkout token")
	f.StringVar(&pf.hold, "hold-ttl", "", "how long new reservations hold their use, e.g. 3m")
}

// patch is the PATCH body of the flags given, and only those; times relative
// to now.
func (pf *patchFlags) patch(cmd *cobra.Command, now time.Time) (voucher.VoucherPatch, error) {
	var p voucher.VoucherPatch
	given := func(name string) bool { return cmd.Flags().Changed(name) }
	if given("discount") {
		p.DiscountAmount = &pf.discount
	}
	if given("min-order") {
		p.MinOrderAmount = &pf.minOrder
	}
	if given("total") {
		p.TotalLimit = &pf.total
	}
	if given("per-user") {
		p.PerUserLimit = &pf.perUser
	}
	if given("require-checkout-token") {
		p.RequireCheckoutToken = &pf.checkoutToken
	}
	if given("hold-ttl") {
		p.HoldTTL = &pf.hold
	}
	for _, w := range []struct {
		flag, value string
		dst         **time.Time
	}{{"starts-at", pf.startsAt, &p.StartsAt}, {"ends-at", pf.endsAt, &p.EndsAt}} {
		if !given(w.flag) {
			continue
		}
		t, err := parseWhen(w.value, now)
		if err != nil {
			return p, fmt.Errorf("--%s: %w", w.flag, err)
		}
		*w.dst = &t
	}
	if p == (voucher.VoucherPatch{}) {
		return p, usagef("patch changes nothing without a term to change: --total, --per-user, --discount, " +
			"--min-order, --starts-at, --ends-at, --require-checkout-token or --hold-ttl")
	}
	return p, nil
}

// preview applies p to before as the ledger would (the same checks, and the
// limit against the uses held as read) and lists what it changes.
func preview(before voucher.Voucher, p voucher.VoucherPatch) (voucher.Voucher, []change, error) {
	after, err := p.Apply(before)
	if err != nil {
		return voucher.Voucher{}, nil, err
	}
	if after.TotalLimit < before.UsedCount {
		return voucher.Voucher{}, nil, voucher.ErrLimitBelowUsed
	}
	after.Remaining = after.TotalLimit - after.UsedCount
	var changes []change
	add := func(field string, b, a any) {
		if cb, ca := cell(b), cell(a); cb != ca {
			changes = append(changes, change{field, cb, ca})
		}
	}
	add("discountAmount", before.DiscountAmount, after.DiscountAmount)
	add("minOrderAmount", before.MinOrderAmount, after.MinOrderAmount)
	add("totalLimit", before.TotalLimit, after.TotalLimit)
	add("perUserLimit", before.PerUserLimit, after.PerUserLimit)
	add("startsAt", before.StartsAt, after.StartsAt)
	add("endsAt", before.EndsAt, after.EndsAt)
	add("requireCheckoutToken", before.RequireCheckoutToken, after.RequireCheckoutToken)
	add("holdTtl", before.HoldTTL, after.HoldTTL)
	add("remaining", before.Remaining, after.Remaining)
	return after, changes, nil
}

func changeRows(w io.Writer, changes []change) {
	row(w, "FIELD", "BEFORE", "AFTER")
	for _, c := range changes {
		row(w, c.Field, c.Before, c.After)
	}
}

// describe is the changes in one line, for the confirmation.
func describe(changes []change) string {
	if len(changes) == 0 {
		return "nothing changes"
	}
	s := make([]string, len(changes))
	for i, c := range changes {
		s[i] = fmt.Sprintf("%s %s -> %s", c.Field, c.Before, c.After)
	}
	return strings.Join(s, ", ")
}
