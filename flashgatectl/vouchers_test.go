package main

import (
	"context"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/client"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
	"github.com/flashgate/flashgate/shared/voucher"
)

// decode parses r's stdout as JSON into a T, failing the test when it is not.
func decode[T any](t *testing.T, r result) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v), "stdout is not JSON: %s", r.stdout)
	return v
}

// createVoucher creates a voucher through flashgatectl, live for a day.
func createVoucher(t *testing.T, flash bool, total int) string {
	t.Helper()
	code := httpxtest.NewCode(t, 12)
	args := []string{"vouchers", "create", code, "--discount", "100000", "--min-order", "1000",
		"--total", strconv.Itoa(total), "--starts-at", "-1m", "--ends-at", "+1d", "-o", "json"}
	if flash {
		args = append(args, "--flash-sale")
		requireAgreementAtEnd(t, code)
	}
	v := decode[voucher.Voucher](t, requireOK(t, ctl(t, args...)))
	require.Equal(t, code, v.Code)
	require.Equal(t, flash, v.FlashSale)
	require.Equal(t, voucher.StateLive, v.State)
	return code
}

func getVoucher(t *testing.T, code string) voucher.Voucher {
	t.Helper()
	return decode[voucher.Voucher](t, requireOK(t, ctl(t, "vouchers", "get", code, "-o", "json")))
}

// TestVoucherCommands drives a flash voucher through every vouchers command
// and audit, in tables and JSON.
func TestVoucherCommands(t *testing.T) {
	t.Parallel()
	code := createVoucher(t, true, 100)

	r := requireOK(t, ctl(t, "vouchers", "get", code))
	assert.Regexp(t, `(?m)^code\s+`+code+`$`, r.stdout)
	assert.Regexp(t, `(?m)^state\s+live$`, r.stdout)

	list := decode[[]voucher.Voucher](t, requireOK(t, ctl(t, "vouchers", "list", "--state", "live", "--flash-sale", "true", "-o", "json")))
	assert.Contains(t, codesOf(list), code)
	r = requireOK(t, ctl(t, "vouchers", "list"))
	assert.Regexp(t, `(?m)^CODE\s+STATE\s+FLASH`, r.stdout)
	assert.Regexp(t, `(?m)^`+code+`\s+live\s+yes\s+100000\s+1000\s+100\s`, r.stdout)
	limited := decode[[]voucher.Voucher](t, requireOK(t, ctl(t, "vouchers", "list", "--limit", "1", "-o", "json")))
	assert.Len(t, limited, 1)

	// pause asks first: refused without a terminal, aborted unless yes is typed.
	r = ctl(t, "vouchers", "pause", code)
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "--yes")
	r = ctlAt(t, typed("no"), "vouchers", "pause", code)
	assert.Equal(t, exitAborted, r.code)
	assert.Contains(t, r.stderr, "Type yes to go on")
	assert.False(t, getVoucher(t, code).Paused, "a refused or aborted pause changed nothing")
	v := decode[voucher.Voucher](t, requireOK(t, ctlAt(t, typed("yes"), "vouchers", "pause", code, "-o", "json")))
	assert.True(t, v.Paused)
	assert.Equal(t, voucher.StatePaused, v.State)

	r = ctl(t, "vouchers", "resume", code)
	assert.Equal(t, exitUsage, r.code)
	// Ctrl-C at the question (the signal cancels the run's context) aborts it.
	unanswered, _ := io.Pipe()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	assert.Equal(t, exitAborted, runCtl(ctx, unanswered, true, "vouchers", "resume", code).code)
	assert.True(t, getVoucher(t, code).Paused)
	v = decode[voucher.Voucher](t, requireOK(t, ctl(t, "vouchers", "resume", code, "--yes", "-o", "json")))
	assert.False(t, v.Paused)

	warm := decode[map[string]any](t, requireOK(t, ctl(t, "vouchers", "warmup", code, "-o", "json")))
	assert.Equal(t, map[string]any{"code": code, "loaded": true}, warm)
	rep := decode[api.ReconcileReport](t, requireOK(t, ctl(t, "vouchers", "reconcile", code, "-o", "json")))
	assert.Equal(t, api.ReconcileReport{Code: code, DBRemaining: 100, RedisRemaining: 100, RedisRemainingAfter: 100}, rep)
	r = requireOK(t, ctl(t, "vouchers", "reconcile", code))
	assert.Regexp(t, `(?m)^drift\s+0$`, r.stdout)

	audit := decode[[]api.AuditEvent](t, requireOK(t, ctl(t, "audit", code, "-o", "json")))
	var actions []string
	for _, e := range audit {
		actions = append(actions, e.Action)
		assert.Equal(t, "default", e.Actor)
	}
	assert.Equal(t, []string{"create", "pause", "resume", "warmup"}, actions)
	r = requireOK(t, ctl(t, "audit", code))
	assert.Regexp(t, `(?m)^AT\s+ACTOR\s+ACTION`, r.stdout)
	assert.Regexp(t, `(?m)\sdefault\s+pause\s`, r.stdout)
}

func codesOf(vs []voucher.Voucher) []string {
	var codes []string
	for _, v := range vs {
		codes = append(codes, v.Code)
	}
	return codes
}

// TestPatch: --dry-run shows the change and changes nothing, a refused patch
// is exit 1 (also when the dry run already knows the ledger would refuse it),
// and a confirmed patch changes only the terms given.
func TestPatch(t *testing.T) {
	t.Parallel()
	code := createVoucher(t, false, 10)
	before := getVoucher(t, code)
	c := client.New(stack.LedgerURL, client.WithToken(ledgerToken))
	for i := range 3 {
		_, err := c.Reserve(t.Context(), code, voucher.Claim{CustomerID: int64(i + 1), OrderID: code + "-o" + strconv.Itoa(i), OrderAmount: 5000})
		require.NoError(t, err)
	}

	dry := decode[dryRun](t, requireOK(t, ctl(t, "vouchers", "patch", code, "--total", "20", "--ends-at", "+2d", "--dry-run", "-o", "json")))
	assert.True(t, dry.DryRun)
	assert.Equal(t, 10, dry.Before.TotalLimit)
	assert.Equal(t, 20, dry.After.TotalLimit)
	assert.Equal(t, 17, dry.After.Remaining)
	var fields []string
	for _, ch := range dry.Changes {
		fields = append(fields, ch.Field)
	}
	assert.Equal(t, []string{"totalLimit", "endsAt", "remaining"}, fields)
	r := requireOK(t, ctl(t, "vouchers", "patch", code, "--discount", "50000", "--dry-run"))
	assert.Regexp(t, `(?m)^discountAmount\s+100000\s+50000$`, r.stdout)
	after := getVoucher(t, code)
	assert.Equal(t, before.TotalLimit, after.TotalLimit, "a dry run changes nothing")
	assert.Equal(t, before.EndsAt, after.EndsAt)
	assert.Equal(t, before.DiscountAmount, after.DiscountAmount)

	r = ctl(t, "vouchers", "patch", code, "--total", "2", "--dry-run")
	assert.Equal(t, exitRefused, r.code)
	assert.Contains(t, r.stderr, voucher.CodeLimitBelowUsed)
	r = ctl(t, "vouchers", "patch", code, "--total", "2", "--yes")
	assert.Equal(t, exitRefused, r.code, "the dry run's check is the ledger's too")
	assert.Contains(t, r.stderr, voucher.CodeLimitBelowUsed)
	assert.Equal(t, exitUsage, ctl(t, "vouchers", "patch", code, "--yes").code, "a patch of nothing")
	assert.Equal(t, exitUsage, ctl(t, "vouchers", "patch", code, "--ends-at", "tomorrow", "--yes").code)
	assert.Equal(t, exitUsage, ctl(t, "vouchers", "patch", code, "--total", "20").code, "no --yes, no terminal")
	r = ctlAt(t, typed("nope"), "vouchers", "patch", code, "--total", "20")
	assert.Equal(t, exitAborted, r.code)
	assert.Contains(t, r.stderr, "totalLimit 10 -> 20")
	assert.Equal(t, 10, getVoucher(t, code).TotalLimit)

	ends := time.Now().Add(48 * time.Hour)
	v := decode[voucher.Voucher](t, requireOK(t, ctl(t, "vouchers", "patch", code, "--total", "20", "--ends-at", "+2d", "--yes", "-o", "json")))
	assert.Equal(t, 20, v.TotalLimit)
	assert.Equal(t, 17, v.Remaining)
	assert.WithinDuration(t, ends, v.EndsAt, time.Minute)
	assert.Equal(t, before.DiscountAmount, v.DiscountAmount, "only the terms given change")
	assert.Equal(t, before.StartsAt, v.StartsAt)
}

// TestExitCodes: one per outcome, whatever the command.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	code := createVoucher(t, false, 5)
	for _, tc := range []struct {
		name string
		args []string
		want int
		says string
	}{
		{"unknown voucher", []string{"vouchers", "get", "NO-SUCH-VOUCHER"}, exitRefused, voucher.CodeVoucherNotFound},
		{"exists", []string{"vouchers", "create", code, "--discount", "1", "--total", "1", "--ends-at", "+1h"}, exitRefused, voucher.CodeVoucherExists},
		{"bad token", []string{"vouchers", "list", "--token", "wrong"}, exitRefused, voucher.CodeUnauthorized},
		{"read-only token", []string{"vouchers", "pause", code, "--yes", "--token", viewerToken}, exitRefused, voucher.CodeForbidden},
		{"invalid", []string{"vouchers", "create", "bad code!", "--discount", "1", "--total", "1", "--ends-at", "+1h"}, exitRefused, voucher.CodeInvalidRequest},
		{"no ledger", []string{"vouchers", "list", "--ledger", "http://127.0.0.1:1", "--timeout", "1s"}, exitUnavailable, voucher.CodeUnavailable},
		{"unknown command", []string{"vouchers", "delete", code}, exitUsage, "unknown command"},
		{"unknown flag", []string{"vouchers", "list", "--colour"}, exitUsage, "unknown flag"},
		{"missing argument", []string{"vouchers", "get"}, exitUsage, "takes CODE"},
		{"missing flag", []string{"vouchers", "create", "X1"}, exitUsage, "required flag"},
		{"bad output", []string{"vouchers", "list", "-o", "yaml"}, exitUsage, "table or json"},
		{"bad ledger", []string{"vouchers", "list", "--ledger", "localhost:8081"}, exitUsage, "--ledger"},
		{"bad time", []string{"vouchers", "create", "X2", "--discount", "1", "--total", "1", "--ends-at", "soon"}, exitUsage, "--ends-at"},
		{"bad event id", []string{"events", "retry", "abc", "--yes"}, exitUsage, "positive event id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ctl(t, tc.args...)
			assert.Equal(t, tc.want, r.code, "stderr: %s", r.stderr)
			assert.Contains(t, r.stderr, tc.says)
		})
	}

	r := requireOK(t, ctl(t, "--version"))
	assert.Regexp(t, `^flashgatectl \S+ \(revision \S+\)\n$`, r.stdout)
	r = requireOK(t, ctl(t, "vouchers", "patch", "--help"))
	assert.Contains(t, r.stdout, "--dry-run")
	assert.Contains(t, r.stdout, "4  aborted", "every --help lists the exit codes")
	r = requireOK(t, ctl(t, "completion", "bash"))
	assert.Contains(t, r.stdout, "__start_flashgatectl")
	r = requireOK(t, ctl(t, "__complete", "vouchers", "get", code[:len(code)-1]))
	assert.Contains(t, strings.Split(r.stdout, "\n"), code, "CODE completes from the ledger's vouchers")
}
