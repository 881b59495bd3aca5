package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/flashgate/flashgate/shared/client"
	"github.com/flashgate/flashgate/shared/voucher"
)

func (a *app) reservationsCommand() *cobra.Command {
	return group("reservations", "List a voucher's reservations, or export them all as CSV",
		a.reservationsList(), a.reservationsExport())
}

func (a *app) reservationsList() *cobra.Command {
	var status string
	var customer int64
	var limit int
	cmd := &cobra.Command{
		Use:               "list CODE",
		Short:             "List a voucher's reservations in creation order (every page)",
		Args:              exactArgs("CODE"),
		ValidArgsFunction: a.completeCode,
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 0 {
				return usagef("--limit must be 0 (all) or more")
			}
			q := client.RecordQuery{Status: voucher.Status(status), CustomerID: customer}
			c, ctx, cancel := a.client(cmd.Context())
			defer cancel()
			rs := []voucher.Record{}
			for {
				q.Limit = 500
				if limit > 0 {
					q.Limit = min(500, limit-len(rs))
				}
				p, err := c.Reservations(ctx, args[0], q)
				if err != nil {
					return called(err)
				}
				rs = append(rs, p.Reservations...)
				if p.NextCursor == nil || (limit > 0 && len(rs) >= limit) {
					break
				}
				q.Cursor = *p.NextCursor
			}
			return a.emit(rs, func(w io.Writer) {
				row(w, "ORDER", "CUSTOMER", "STATUS", "ORDER-AMOUNT", "DISCOUNT", "CREATED", "EXPIRES", "CONFIRMED", "RELEASED", "REASON")
				for _, r := range rs {
					row(w, r.OrderID, r.CustomerID, r.Status, r.OrderAmount, r.DiscountAmount, r.CreatedAt, r.ExpiresAt,
						r.ConfirmedAt, r.ReleasedAt, r.ReleaseReason)
				}
			})
		},
	}
	cmd.Flags().StringVar(&status, "status", "", "only reservations in this status: RESERVED, CONFIRMED, RELEASED or REFUNDED")
	cmd.Flags().Int64Var(&customer, "customer", 0, "only this customerId's reservations")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many reservations (0: all)")
	_ = cmd.RegisterFlagCompletionFunc("status", cobra.FixedCompletions([]string{
		string(voucher.Reserved), string(voucher.Confirmed), string(voucher.Released), string(voucher.Refunded),
	}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (a *app) reservationsExport() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "export CODE",
		Short: "Write every reservation of a voucher as CSV, streamed (always CSV, whatever -o says)",
		Long: `Write every reservation of a voucher as CSV, as the ledger streams it from
Postgres: header order_id,customer_id,status,order_amount,discount_amount,
created_at,expires_at,confirmed_at,released_at,release_reason. To stdout, or
with --file to a file that appears only once the whole export arrived (it is
written beside it under an unpredictable temporary name first), readable by
its owner alone (mode 0600). -o does not apply.`,
		Args:              exactArgs("CODE"),
		ValidArgsFunction: a.completeCode,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, cancel := a.client(cmd.Context())
			defer cancel()
			if file == "" {
				_, err := c.StreamExport(ctx, args[0], a.stdout)
				return exportError(err)
			}
			// Mode 0600 under a name no one can guess beforehand (a
			// predictable one could be a planted link): the export holds
			// every customer's orders.
			f, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*.partial")
			if err != nil {
				return err
			}
			partial := f.Name()
			n, err := c.StreamExport(ctx, args[0], f)
			if cerr := f.Close(); err == nil && cerr != nil {
				err = cerr
			}
			if err != nil {
				os.Remove(partial)
				return exportError(err)
			}
			if err := os.Rename(partial, file); err != nil {
				os.Remove(partial)
				return err
			}
			fmt.Fprintf(a.stderr, "wrote %d bytes to %s\n", n, filepath.Clean(file))
			return nil
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "write the CSV to this file instead of stdout")
	return cmd
}

// exportError marks what the ledger answered (or did not) as a ledger call's
// outcome; a failed local write stays the command line's own.
func exportError(err error) error {
	if err == nil {
		return nil
	}
	if voucher.ErrorCode(err) != "" {
		return called(err)
	}
	return err
}
