// Command flashgatectl is the operator's command line over the ledger's admin
// routes (shared/client): vouchers, their reservations and audit trail, and
// the events outbox. It prints tables for people and JSON (-o json) for
// scripts, asks before a change that alters a running sale, and says how a
// command ended in its exit code (see exitCodes).
//
// main is wiring only: the command tree is built by newRoot over an app that
// holds the process's streams, environment, clock and terminal test, so that
// the tests run the same tree in process against a real ledger.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"

	"github.com/flashgate/flashgate/shared/voucher"
)

// Exit codes, one per outcome a script can act on.
const (
	exitOK          = 0 // done
	exitRefused     = 1 // the ledger answered 4xx: a bad token, a missing voucher, a refused change
	exitUsage       = 2 // a bad command, flag or argument; a change without --yes and no terminal
	exitUnavailable = 3 // no answer, or 5xx (503 retried until --timeout) or 429: try again later
	exitAborted     = 4 // the operator did not type yes at the confirmation
)

// exitCodes is the table --help ends with.
const exitCodes = `Exit codes:
  0  done
  1  refused by the ledger (4xx: UNAUTHORIZED, FORBIDDEN, VOUCHER_NOT_FOUND, LIMIT_BELOW_USED, ...)
  2  usage error (a bad command, flag or argument), or a change without --yes and no terminal
  3  unavailable: no answer, or 5xx/503 (retried until --timeout) or 429
  4  aborted: the confirmation was not answered yes`

// app is what a run of the command tree reads and writes besides the ledger.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	interactive    func() bool // a person can answer the confirmation (stdin and stderr are terminals)
	now            func() time.Time

	// Global flags, filled by the root command's parse.
	ledger, token, output string
	tokenFile             string // --token-file
	tokenStdin            bool   // --token-stdin
	timeout               time.Duration
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	a := &app{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, now: time.Now,
		interactive: func() bool {
			return isatty.IsTerminal(os.Stdin.Fd()) && isatty.IsTerminal(os.Stderr.Fd())
		},
	}
	code := a.run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// run executes one command line and returns its exit code, having printed
// the error, if any, on stderr.
func (a *app) run(ctx context.Context, args []string) int {
	root := newRoot(a)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	code := exitCode(err)
	if code != exitAborted {
		fmt.Fprintln(a.stderr, "flashgatectl:", err)
	} else {
		fmt.Fprintln(a.stderr, "flashgatectl: aborted, nothing changed")
	}
	if code == exitUsage && !errors.As(err, new(*confirmError)) {
		fmt.Fprintln(a.stderr, "Run 'flashgatectl --help' for usage.")
	}
	return code
}

// errAborted is the confirmation answered otherwise than yes.
var errAborted = errors.New("aborted at the confirmation")

// confirmError is a change refused for want of a confirmation: no --yes and
// no terminal to ask on.
type confirmError struct{ what string }

func (e *confirmError) Error() string {
	return strings.TrimSuffix(e.what, ".") + ": no terminal to confirm on; pass --yes to do it without asking"
}

// ledgerError is an error of a call to the ledger (an answer, or none): its
// exit code depends on what the ledger said.
type ledgerError struct{ err error }

func (e *ledgerError) Error() string { return e.err.Error() }
func (e *ledgerError) Unwrap() error { return e.err }

// called marks err as the outcome of a ledger call.
func called(err error) error {
	if err == nil {
		return nil
	}
	return &ledgerError{err}
}

// exitCode maps a command's error to its exit code. An error that is neither
// a ledger call's nor an abort is the command line's own: cobra's parse
// errors, a bad argument, a file that cannot be written.
func exitCode(err error) int {
	var le *ledgerError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errAborted):
		return exitAborted
	case errors.As(err, &le):
		switch voucher.ErrorCode(err) {
		case "", voucher.CodeUnavailable, voucher.CodeRateLimited:
			return exitUnavailable // no answer, a fault, or an answer without a code
		}
		return exitRefused
	}
	return exitUsage
}
