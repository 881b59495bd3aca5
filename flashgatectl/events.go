package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/events"
)

func (a *app) eventsCommand() *cobra.Command {
	return group("events", "Read the events outbox; list and retry events a sink gave up on",
		a.eventsTail(), a.eventsFailed(), a.eventsRetry())
}

func (a *app) eventsTail() *cobra.Command {
	var (
		after        int64
		limit        int
		code         string
		follow       bool
		pollInterval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "tail",
		Short: "Print the events after --after in id order; --follow keeps polling for new ones",
		Long: `Print the outbox's events after --after (0: from the oldest kept) in id order,
up to the ledger's watermark (an event shown is final: none with a lower id
can still appear). --follow polls every --interval until interrupted. With
-o json each event is one JSON object a line (JSON Lines), so that a follow
can be piped to jq.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 || after < 0 || pollInterval <= 0 {
				return usagef("--after and --limit must be 0 or more, --interval above 0")
			}
			c := a.ledgerClient() // each poll gets its own --timeout: a follow runs for as long as it is left to
			printed, header := 0, true
			for {
				ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
				p, err := c.Events(ctx, after, pageSize(limit, printed))
				cancel()
				if err != nil {
					if follow && cmd.Context().Err() != nil {
						return nil // interrupted
					}
					return called(err)
				}
				shown := filterEvents(p.Events, code)
				if err := a.printEvents(shown, header); err != nil {
					return err
				}
				header = false
				printed += len(shown)
				after = p.NextAfter
				switch {
				case limit > 0 && printed >= limit:
					return nil
				case len(p.Events) > 0:
					continue // more may be waiting
				case !follow:
					return nil
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(pollInterval):
				}
			}
		},
	}
	f := cmd.Flags()
	f.Int64Var(&after, "after", 0, "start after this event id")
	f.IntVar(&limit, "limit", 0, "stop after this many events (0: all)")
	f.StringVar(&code, "voucher", "", "only this voucher's events")
	f.BoolVarP(&follow, "follow", "f", false, "keep polling for new events until interrupted")
	f.DurationVar(&pollInterval, "interval", time.Second, "how often --follow polls")
	return cmd
}

// pageSize is the page to ask for: the most the ledger serves, or what is left of limit.
func pageSize(limit, printed int) int {
	if limit == 0 {
		return 500
	}
	return min(500, limit-printed)
}

func filterEvents(evs []events.Event, code string) []events.Event {
	if code == "" {
		return evs
	}
	var out []events.Event
	for _, e := range evs {
		if e.VoucherCode == code {
			out = append(out, e)
		}
	}
	return out
}

// printEvents writes one page of the feed: JSON Lines, or table rows, after
// the header when asked (the first page's, rows or none: an event is readable
// only once the watermark passes it, about a second after its commit, and a
// tail that printed nothing until then looked hung).
func (a *app) printEvents(evs []events.Event, header bool) error {
	if a.output == "json" {
		enc := json.NewEncoder(a.stdout)
		for _, e := range evs {
			if err := enc.Encode(e); err != nil {
				return err
			}
		}
		return nil
	}
	if len(evs) == 0 && !header {
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	if header {
		row(tw, "ID", "OCCURRED", "VOUCHER", "TYPE", "DATA")
	}
	for _, e := range evs {
		row(tw, e.ID, e.OccurredAt, e.VoucherCode, e.Type, e.Data)
	}
	return tw.Flush()
}

func (a *app) eventsFailed() *cobra.Command {
	var after int64
	cmd := &cobra.Command{
		Use:   "failed",
		Short: "List the events a sink parked after its attempts (one row per event and sink)",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ctx, cancel := a.client(cmd.Context())
			defer cancel()
			ps := []api.ParkedEvent{}
			for {
				p, err := c.FailedEvents(ctx, after, 500)
				if err != nil {
					return called(err)
				}
				ps = append(ps, p.Events...)
				if len(p.Events) == 0 {
					break
				}
				after = p.NextAfter
			}
			return a.emit(ps, func(w io.Writer) { parkedRows(w, ps) })
		},
	}
	cmd.Flags().Int64Var(&after, "after", 0, "start after this event id")
	return cmd
}

func parkedRows(w io.Writer, ps []api.ParkedEvent) {
	row(w, "ID", "VOUCHER", "TYPE", "SINK", "STATUS", "ATTEMPTS", "FAILED", "LAST-ERROR")
	for _, p := range ps {
		row(w, p.ID, p.VoucherCode, p.Type, p.Sink, p.Status, p.Attempts, p.FailedAt, p.LastError)
	}
}

func (a *app) eventsRetry() *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "retry ID",
		Short: "Send a parked event again to every sink that gave up on it",
		Long: `Send a parked event again to every sink that gave up on it, within a moment:
out of its voucher's order (receivers deduplicate by id). Then the failure is
gone, or parked again after its attempts. An id no sink parked is NOT_FOUND.`,
		Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id <= 0 {
				return usagef("ID must be a positive event id, not %q", args[0])
			}
			if err := a.confirm(cmd.Context(), yes, fmt.Sprintf("Send event %d again to every sink that parked it.", id)); err != nil {
				return err
			}
			c, ctx, cancel := a.client(cmd.Context())
			defer cancel()
			ps, err := c.RetryEvent(ctx, id)
			if err != nil {
				return called(err)
			}
			return a.emit(ps, func(w io.Writer) { parkedRows(w, ps) })
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do it without asking")
	return cmd
}
