package main

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/flashgate/flashgate/shared/api"
)

func (a *app) auditCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "audit CODE",
		Short: "Show what was done to a voucher, by whom (the token's name), oldest first",
		Long: `Show a voucher's audit trail, oldest first: create, update, pause, resume,
warmup, and reconcile when it repaired something. The actor is the token's
name (default for LEDGER_TOKEN, a name from LEDGER_TOKENS; reconciler for the
periodic reconciler). before and after are the voucher's terms, or Redis's
state for warmup and reconcile.`,
		Args:              exactArgs("CODE"),
		ValidArgsFunction: a.completeCode,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, cancel := a.client(cmd.Context())
			defer cancel()
			evs, err := c.Audit(ctx, args[0])
			if err != nil {
				return called(err)
			}
			if evs == nil {
				evs = []api.AuditEvent{}
			}
			return a.emit(evs, func(w io.Writer) {
				row(w, "AT", "ACTOR", "ACTION", "BEFORE", "AFTER")
				for _, e := range evs {
					row(w, e.At, e.Actor, e.Action, e.Before, e.After)
				}
			})
		},
	}
}
