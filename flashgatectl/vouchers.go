package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/client"
	"github.com/flashgate/flashgate/shared/voucher"
)

func (a *app) vouchersCommand() *cobra.Command {
	return group("vouchers", "List, create and change vouchers; pause, resume, warm up and reconcile them",
		a.vouchersList(), a.vouchersGet(), a.vouchersCreate(), a.vouchersPatch(),
		a.vouchersPause(), a.vouchersResume(), a.vouchersWarmup(), a.vouchersReconcile())
}

func (a *app) vouchersList() *cobra.Command {
	var state, flash string
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List vouchers by code, with their state and counters (every page)",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := client.VoucherQuery{State: state}
			switch flash {
			case "":
			case "true", "false":
				b := flash == "true"
				q.FlashSale = &b
			default:
				return usagef("--flash-sale must be true or false, not %q", flash)
			}
			if limit < 0 {
				return usagef("--limit must be 0 (all) or more")
			}
			c, ctx, cancel := a.client(cmd.Context())
			defer cancel()
			vs := []voucher.Voucher{}
			for {
				q.Limit = 500
				if limit > 0 {
					q.Limit = min(500, limit-len(vs))
				}
				p, err := c.ListVouchers(ctx, q)
				if err != nil {
					return called(err)
				}
				vs = append(vs, p.Vouchers...)
				if p.NextCursor == nil || (limit > 0 && len(vs) >= limit) {
					break
				}
				q.Cursor = *p.NextCursor
			}
			return a.emit(vs, func(w io.Writer) { voucherRows(w, vs) })
		},
	}
	cmd.Flags().StringVar(&state, "state", "", "only vouchers in this state: scheduled, live, paused or ended")
	cmd.Flags().StringVar(&flash, "flash-sale", "", "only flash (true) or standard (false) vouchers")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many vouchers (0: all)")
	_ = cmd.RegisterFlagCompletionFunc("state", cobra.FixedCompletions(
		[]string{voucher.StateScheduled, voucher.StateLive, voucher.StatePaused, voucher.StateEnded}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("flash-sale", cobra.FixedCompletions([]string{"true", "false"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (a *app) vouchersGet() *cobra.Command {
	return &cobra.Command{
		Use:               "get CODE",
		Short:             "Show a voucher: its terms, state and counters (a log voucher's: and the consumer group's lag)",
		Args:              exactArgs("CODE"),
		ValidArgsFunction: a.completeCode,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, cancel := a.client(cmd.Context())
			defer cancel()
			v, err := c.Voucher(ctx, args[0])
			if err != nil {
				return called(err)
			}
			if v.WritePath != voucher.WritePathLog || a.output == "json" {
				return a.emit(v, func(w io.Writer) { voucherFields(w, v) })
			}
			// A log voucher's rows follow its 201s by the group's lag.
			l, err := c.AdmissionsLag(ctx)
			if err != nil {
				return called(err)
			}
			return a.emit(v, func(w io.Writer) { voucherFields(w, v); row(w, "logLag", lagCell(l)) })
		},
	}
}

func (a *app) vouchersCreate() *cobra.Command {
	var (
		discount, minOrder     int64
		total, perUser         int
		startsAt, endsAt, hold string
		flash, checkoutToken   bool
	)
	cmd := &cobra.Command{
		Use:   "create CODE",
		Short: "Create a voucher (a flash one is loaded into Redis at once)",
		Example: `  flashgatectl vouchers create FLASH100 --flash-sale --discount 100000 --min-order 500000 \
    --total 1000 --per-user 1 --starts-at +1h --ends-at +1d`,
		Args: exactArgs("CODE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			code := args[0]
			n := voucher.NewVoucher{
				Code: &code, DiscountAmount: &discount, MinOrderAmount: &minOrder, TotalLimit: &total,
				PerUserLimit: &perUser, FlashSale: &flash, RequireCheckoutToken: &checkoutToken,
			}
			starts, err := parseWhen(startsAt, a.now())
			if err != nil {
				return fmt.Errorf("--starts-at: %w", err)
			}
			ends, err := parseWhen(endsAt, a.now())
			if err != nil {
				return fmt.Errorf("--ends-at: %w", err)
			}
			n.StartsAt, n.EndsAt = &starts, &ends
			if hold != "" {
				n.HoldTTL = &hold
			}
			c, ctx, cancel := a.client(cmd.Context())
			defer cancel()
			v, err := c.CreateVoucher(ctx, n)
			if err != nil {
				return called(err)
			}
			return a.emit(v, func(w io.Writer) { voucherFields(w, v) })
		},
	}
	f := cmd.Flags()
	f.Int64Var(&discount, "discount", 0, "discountAmount: what one use takes off an order (required)")
	f.Int64Var(&minOrder, "min-order", 0, "minOrderAmount: the least orderAmount that may use it")
	f.IntVar(&total, "total", 0, "totalLimit: uses on sale (required)")
	f.IntVar(&perUser, "per-user", 1, "perUserLimit: uses one customer may hold")
	f.StringVar(&startsAt, "starts-at", "now", "startsAt: now, an offset such as +1h, or an RFC 3339 time")
	f.StringVar(&endsAt, "ends-at", "", "endsAt: an offset such as +24h or +2d, or an RFC 3339 time (required)")
	f.BoolVar(&flash, "flash-sale", false, "a flash voucher, decided in Redis at the proxies")
	f.BoolVar(&checkoutToken, "require-checkout-token", false, "reserves must carry a checkout token the shop minted")
	f.StringVar(&hold, "hold-ttl", "", "how long a reservation holds its use, e.g. 3m (default: the ledger's RESERVATION_TTL)")
	for _, name := range []string{"discount", "total", "ends-at"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

func (a *app) vouchersPause() *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:               "pause CODE",
		Short:             "Stop new reservations of a voucher at once (confirm, release, refund go on)",
		Args:              exactArgs("CODE"),
		ValidArgsFunction: a.completeCode,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.change(cmd, yes, fmt.Sprintf("Pause %s: every new reserve will be refused (NOT_ELIGIBLE, PAUSED).", args[0]),
				func(c *client.Client, ctx context.Context) (voucher.Voucher, error) { return c.Pause(ctx, args[0]) })
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do it without asking")
	return cmd
}

func (a *app) vouchersResume() *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:               "resume CODE",
		Short:             "Sell a paused voucher again",
		Args:              exactArgs("CODE"),
		ValidArgsFunction: a.completeCode,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.change(cmd, yes, fmt.Sprintf("Resume %s: it sells again at once, on its current terms.", args[0]),
				func(c *client.Client, ctx context.Context) (voucher.Voucher, error) { return c.Resume(ctx, args[0]) })
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do it without asking")
	return cmd
}

// change confirms, calls do and prints the voucher it answers.
func (a *app) change(cmd *cobra.Command, yes bool, what string, do func(*client.Client, context.Context) (voucher.Voucher, error)) error {
	if err := a.confirm(cmd.Context(), yes, what); err != nil {
		return err
	}
	c, ctx, cancel := a.client(cmd.Context())
	defer cancel()
	v, err := do(c, ctx)
	if err != nil {
		return called(err)
	}
	return a.emit(v, func(w io.Writer) { voucherFields(w, v) })
}

func (a *app) vouchersWarmup() *cobra.Command {
	return &cobra.Command{
		Use:               "warmup CODE",
		Short:             "Load a flash voucher into Redis from the database (never overwrites a loaded one)",
		Args:              exactArgs("CODE"),
		ValidArgsFunction: a.completeCode,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, cancel := a.client(cmd.Context())
			defer cancel()
			if err := c.Warmup(ctx, args[0]); err != nil {
				return called(err)
			}
			out := api.WarmupResult{Code: args[0], Loaded: true} // what the route answered
			return a.emit(out, func(w io.Writer) { row(w, "code", out.Code); row(w, "loaded", out.Loaded) })
		},
	}
}

func (a *app) vouchersReconcile() *cobra.Command {
	return &cobra.Command{
		Use:   "reconcile CODE",
		Short: "Compare a flash voucher's Redis state with the database and repair Redis from it",
		Long: `Compare a flash voucher's Redis state with the database, and rewrite Redis from
the database where they differ (the database is never changed). It asks no
confirmation: it is the check before and after a sale, and what the drift
alerts ask for.`,
		Args:              exactArgs("CODE"),
		ValidArgsFunction: a.completeCode,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, cancel := a.client(cmd.Context())
			defer cancel()
			r, err := c.Reconcile(ctx, args[0])
			if err != nil {
				return called(err)
			}
			return a.emit(r, func(w io.Writer) {
				row(w, "code", r.Code)
				row(w, "dbRemaining", r.DBRemaining)
				row(w, "redisRemaining", r.RedisRemaining)
				row(w, "redisRemainingAfter", r.RedisRemainingAfter)
				row(w, "drift", r.Drift)
				row(w, "released", r.Released)
				row(w, "restored", r.Restored)
				row(w, "reloaded", r.Reloaded)
			})
		},
	}
}

// completeCode offers the ledger's voucher codes (the first 500 from what is
// typed) for a CODE argument.
func (a *app) completeCode(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 || a.settle(cmd) != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	c, ctx, cancel := a.client(cmd.Context())
	defer cancel()
	p, err := c.ListVouchers(ctx, client.VoucherQuery{Limit: 500})
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var codes []cobra.Completion
	for _, v := range p.Vouchers {
		if strings.HasPrefix(v.Code, toComplete) {
			codes = append(codes, v.Code)
		}
	}
	return codes, cobra.ShellCompDirectiveNoFileComp
}
