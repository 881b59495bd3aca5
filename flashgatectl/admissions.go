package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/flashgate/flashgate/shared/api"
)

func (a *app) admissionsCommand() *cobra.Command {
	return group("admissions", "List, replay and discard the log vouchers' admissions the database refused; read the consumer group's lag",
		a.admissionsFailed(), a.admissionsReplay(), a.admissionsDiscard(), a.admissionsLag())
}

func (a *app) admissionsFailed() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "failed",
		Short: "List the refused admissions still open, oldest first (--all: the replayed and discarded too)",
		Long: `List the admissions of writePath log vouchers that the database refused when
the consumer wrote them (dead letters): each is also in the dead-letter
topic, and its use was given back in Redis. A replay refused again is open
again, with its new reason, and FAILURES counts the refusals. At most the
oldest 500 are listed.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ctx, cancel := a.client(cmd.Context())
			defer cancel()
			fs, err := c.FailedAdmissions(ctx, all, 500)
			if err != nil {
				return called(err)
			}
			if fs == nil {
				fs = []api.FailedAdmission{}
			}
			return a.emit(fs, func(w io.Writer) { failedRows(w, fs) })
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "the replayed and discarded ones too")
	return cmd
}

func failedRows(w io.Writer, fs []api.FailedAdmission) {
	row(w, "VOUCHER", "ORDER", "CUSTOMER", "REASON", "FAILURES", "FAILED", "RESOLUTION", "MESSAGE")
	for _, f := range fs {
		row(w, f.Code, f.OrderID, f.CustomerID, f.Reason, f.Failures, f.FailedAt, f.Resolution, f.Message)
	}
}

func (a *app) admissionsReplay() *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "replay CODE ORDER",
		Short: "Reserve a refused admission again, once its cause is removed",
		Long: `Reserve a refused admission again as a reserve of its order would (the Redis
gate takes a use, then the voucher's write path), answered as a reserve is. A
201 closes it as replayed; on a log voucher the consumer writes it later, and
if the database refuses it again it is listed open again (admissions failed).`,
		Args:              exactArgs("CODE", "ORDER"),
		ValidArgsFunction: a.completeCode,
		RunE: func(cmd *cobra.Command, args []string) error {
			code, order := args[0], args[1]
			if err := a.confirm(cmd.Context(), yes, fmt.Sprintf("Reserve order %s of voucher %s again.", order, code)); err != nil {
				return err
			}
			c, ctx, cancel := a.client(cmd.Context())
			defer cancel()
			r, err := c.ReplayAdmission(ctx, code, order)
			if err != nil {
				return called(err)
			}
			return a.emit(r, func(w io.Writer) {
				row(w, "ORDER", "DISCOUNT", "REPLAYED")
				row(w, r.OrderID, r.DiscountAmount, r.Replayed)
			})
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do it without asking")
	return cmd
}

func (a *app) admissionsDiscard() *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:               "discard CODE ORDER",
		Short:             "Close a refused admission without reserving it (its use was given back when it was refused)",
		Args:              exactArgs("CODE", "ORDER"),
		ValidArgsFunction: a.completeCode,
		RunE: func(cmd *cobra.Command, args []string) error {
			code, order := args[0], args[1]
			if err := a.confirm(cmd.Context(), yes, fmt.Sprintf("Close the refused admission of order %s of voucher %s.", order, code)); err != nil {
				return err
			}
			c, ctx, cancel := a.client(cmd.Context())
			defer cancel()
			f, err := c.DiscardAdmission(ctx, code, order)
			if err != nil {
				return called(err)
			}
			fs := []api.FailedAdmission{f}
			return a.emit(f, func(w io.Writer) { failedRows(w, fs) })
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do it without asking")
	return cmd
}

func (a *app) admissionsLag() *cobra.Command {
	return &cobra.Command{
		Use:   "lag",
		Short: "Show the admissions consumer group's lag, as the reconciler and settler trust it",
		Long: `Show the admissions consumer group's lag as the ledger measures it from the
broker: every admission acknowledged longer ago was written and committed by
the group. Unknown until measured; then no log voucher's hold is freed.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ctx, cancel := a.client(cmd.Context())
			defer cancel()
			l, err := c.AdmissionsLag(ctx)
			if err != nil {
				return called(err)
			}
			return a.emit(l, func(w io.Writer) { row(w, "logLag", lagCell(l)) })
		},
	}
}

// lagCell is the group's lag as a field of a table.
func lagCell(l api.AdmissionsLag) string {
	switch {
	case !l.Log:
		return "no admissions log on this ledger"
	case !l.Known || l.LagSeconds == nil:
		return "unknown (no hold of a log voucher is freed)"
	}
	return (time.Duration(*l.LagSeconds * float64(time.Second))).Round(time.Millisecond).String()
}
