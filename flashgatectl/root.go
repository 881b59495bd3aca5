package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/flashgate/flashgate/shared/buildinfo"
	"github.com/flashgate/flashgate/shared/client"
)

// The environment flashgatectl reads; its flags override it. They are not
// the services' LEDGER_URL and LEDGER_TOKEN: a proxy's LEDGER_TOKEN is an
// `internal` token that cannot change anything, and an operator's shell should
// not pick it up by accident.
const (
	envLedger = "FLASHGATE_LEDGER"
	envToken  = "FLASHGATE_TOKEN"
)

const defaultLedger = "http://127.0.0.1:8081"

// newRoot builds the whole command tree over a.
func newRoot(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "flashgatectl",
		Short: "Operate a flashgate sale through the ledger's admin routes",
		Long: `flashgatectl operates a flashgate sale through the ledger's admin routes:
vouchers (list, create, change, pause, resume, warm up, reconcile), their
reservations (list, CSV export), the events outbox (tail, failed, retry) and
the audit trail.

The ledger and the token come from --ledger and --token (or --token-file,
--token-stdin), else from ` + envLedger + ` and ` + envToken + ` (prefer a file,
stdin or the environment: a flag is visible in ps). A token sent over
http:// to a host other than this machine is warned about on stderr.
Output is a table, or JSON with -o json (a list is a JSON array; events tail
writes one JSON object per line). A change that alters a running sale (patch,
pause, resume, events retry) asks you to type yes on a terminal; --yes skips
the question, and without a terminal --yes is required.`,
		Version:       fmt.Sprintf("%s (revision %s)", buildinfo.Version(), buildinfo.Revision()),
		SilenceErrors: true, // run prints the error once, with the exit code's meaning
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return a.settle(cmd)
		},
	}
	root.SetVersionTemplate("flashgatectl {{.Version}}\n")
	root.SetUsageTemplate(root.UsageTemplate() + "\n" + exitCodes + "\n") // every command's --help ends with them
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usagef("%v", err) })
	f := root.PersistentFlags()
	f.StringVar(&a.ledger, "ledger", "", "the ledger's base URL (default $"+envLedger+", else "+defaultLedger+")")
	f.StringVar(&a.token, "token", "", "a ledger token with the read or write scope the command needs (default $"+envToken+")")
	f.StringVar(&a.tokenFile, "token-file", "", "read the token from the first line of this file instead")
	f.BoolVar(&a.tokenStdin, "token-stdin", false, "read the token from the first line of stdin instead (a change then needs --yes)")
	f.StringVarP(&a.output, "output", "o", "table", "output format: table or json")
	f.DurationVar(&a.timeout, "timeout", 30*time.Second, "how long a command waits for the ledger, retries of 503 included")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json"}, cobra.ShellCompDirectiveNoFileComp))

	root.AddCommand(a.vouchersCommand(), a.reservationsCommand(), a.eventsCommand(), a.admissionsCommand(), a.auditCommand())
	return root
}

// settle fills what the flags left to the environment and checks the global
// flags, before any command runs.
func (a *app) settle(cmd *cobra.Command) error {
	if !cmd.Flags().Changed("ledger") {
		a.ledger = a.getenv(envLedger)
	}
	if a.ledger == "" {
		a.ledger = defaultLedger
	}
	switch {
	case a.output != "table" && a.output != "json":
		return usagef("-o must be table or json, not %q", a.output)
	case !strings.HasPrefix(a.ledger, "http://") && !strings.HasPrefix(a.ledger, "https://"):
		return usagef("--ledger must be an http:// or https:// URL, not %q", a.ledger)
	case a.timeout <= 0:
		return usagef("--timeout must be above 0")
	}
	return a.settleToken(cmd)
}

// client returns a client of the ledger and a context bounded by --timeout.
// Each attempt is bounded by the context alone: an export of a big sale
// streams for as long as --timeout allows.
func (a *app) client(ctx context.Context) (*client.Client, context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	return a.ledgerClient(), ctx, cancel
}

// ledgerClient is a client of the ledger whose attempts only the caller's
// context bounds.
func (a *app) ledgerClient() *client.Client {
	return client.New(a.ledger, client.WithToken(a.token), client.WithHTTPClient(&http.Client{}))
}

// group is a command that only holds subcommands: run bare it prints its
// help; an argument that names no subcommand is a usage error.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	g := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
	g.AddCommand(subs...)
	return g
}

// usageError is a mistake in the command line: exit 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// exactArgs is cobra.ExactArgs naming the arguments expected.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != len(names) {
			return usagef("%s takes %s (got %d arguments)", cmd.CommandPath(), strings.Join(names, " "), len(args))
		}
		return nil
	}
}
