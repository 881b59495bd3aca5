package main

import (
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/client"
	"github.com/flashgate/flashgate/shared/events"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
	"github.com/flashgate/flashgate/shared/voucher"
)

// TestReservations: list (all, by status, by customer, in a table) and export
// (stdout, and a file that appears whole) show the orders the ledger holds.
func TestReservations(t *testing.T) {
	t.Parallel()
	code := createVoucher(t, false, 10)
	c := client.New(stack.LedgerURL, client.WithToken(ledgerToken))
	orders := make([]string, 3)
	for i := range orders {
		orders[i] = code + "-o" + strconv.Itoa(i)
		_, err := c.Reserve(t.Context(), code, voucher.Claim{CustomerID: int64(40 + i), OrderID: orders[i], OrderAmount: 750_000})
		require.NoError(t, err)
	}
	_, err := c.Confirm(t.Context(), code, orders[0])
	require.NoError(t, err)
	require.NoError(t, c.Release(t.Context(), code, orders[1]))

	all := decode[[]voucher.Record](t, requireOK(t, ctl(t, "reservations", "list", code, "-o", "json")))
	require.Len(t, all, 3)
	for i, r := range all {
		assert.Equal(t, orders[i], r.OrderID, "creation order")
	}
	confirmed := decode[[]voucher.Record](t, requireOK(t, ctl(t, "reservations", "list", code, "--status", "CONFIRMED", "-o", "json")))
	require.Len(t, confirmed, 1)
	assert.Equal(t, orders[0], confirmed[0].OrderID)
	mine := decode[[]voucher.Record](t, requireOK(t, ctl(t, "reservations", "list", code, "--customer", "41", "-o", "json")))
	require.Len(t, mine, 1)
	assert.Equal(t, voucher.Released, mine[0].Status)
	none := ctl(t, "reservations", "list", code, "--customer", "99", "-o", "json")
	assert.JSONEq(t, `[]`, requireOK(t, none).stdout, "an empty list is an empty JSON array")
	r := requireOK(t, ctl(t, "reservations", "list", code))
	assert.Regexp(t, `(?m)^ORDER\s+CUSTOMER\s+STATUS`, r.stdout)
	assert.Regexp(t, `(?m)^`+orders[1]+`\s+41\s+RELEASED\s+750000\s+100000\s.*\sCANCELLED$`, r.stdout)
	assert.Equal(t, exitRefused, ctl(t, "reservations", "list", code, "--status", "LOST").code)

	r = requireOK(t, ctl(t, "reservations", "export", code))
	rows, err := csv.NewReader(strings.NewReader(r.stdout)).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 4)
	assert.Equal(t, "order_id", rows[0][0])
	assert.Equal(t, []string{orders[0], "40", "CONFIRMED"}, rows[1][:3])
	assert.Equal(t, []string{orders[1], "41", "RELEASED"}, rows[2][:3])

	file := filepath.Join(t.TempDir(), "orders.csv")
	r = requireOK(t, ctl(t, "reservations", "export", code, "--file", file, "-o", "json"))
	got, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, ctl(t, "reservations", "export", code).stdout, string(got))
	assert.Contains(t, r.stderr, "wrote")
	assert.NoFileExists(t, file+".partial")
	info, err := os.Stat(file)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "an export holds every customer's orders: its owner's alone")
	left, err := filepath.Glob(filepath.Join(filepath.Dir(file), ".*partial"))
	require.NoError(t, err)
	assert.Empty(t, left, "no temporary file left behind")

	r = ctl(t, "reservations", "export", "NO-SUCH-VOUCHER", "--file", file+"2")
	assert.Equal(t, exitRefused, r.code, "stderr: %s", r.stderr)
	assert.NoFileExists(t, file+"2")
	assert.NoFileExists(t, file+"2.partial")
	assert.Equal(t, exitUsage, ctl(t, "reservations", "export", code, "--file", filepath.Join(t.TempDir(), "no", "dir.csv")).code)
}

// TestEvents: tail reads the feed (JSON Lines, a table, one voucher's), and
// since the stack's webhook always fails, every event is parked: failed lists
// it and retry sends it again, after the confirmation.
func TestEvents(t *testing.T) {
	t.Parallel()
	code := createVoucher(t, false, 10)
	requireOK(t, ctl(t, "vouchers", "pause", code, "--yes"))

	var mine []events.Event
	require.Eventually(t, func() bool { // the feed serves events up to the watermark, moved every 100 ms
		r := requireOK(t, ctl(t, "events", "tail", "--voucher", code, "-o", "json"))
		mine = nil
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			if line == "" {
				continue
			}
			var e events.Event
			require.NoError(t, json.Unmarshal([]byte(line), &e), "a JSON line: %s", line)
			mine = append(mine, e)
		}
		return len(mine) == 2
	}, 10*time.Second, 100*time.Millisecond)
	assert.Equal(t, []string{events.VoucherCreated, events.VoucherPaused}, []string{mine[0].Type, mine[1].Type})
	r := requireOK(t, ctl(t, "events", "tail", "--voucher", code))
	assert.Regexp(t, `(?m)^ID\s+OCCURRED\s+VOUCHER\s+TYPE\s+DATA$`, r.stdout)
	assert.Regexp(t, `(?m)^`+strconv.FormatInt(mine[1].ID, 10)+`\s+\S+\s+`+code+`\s+voucher.paused\s+\{`, r.stdout)
	r = requireOK(t, ctl(t, "events", "tail", "--after", strconv.FormatInt(mine[0].ID-1, 10), "--limit", "1", "-o", "json"))
	assert.Equal(t, 1, strings.Count(r.stdout, "\n"), "--limit 1 prints one event")

	id := mine[0].ID
	var parked []api.ParkedEvent
	require.Eventually(t, func() bool { // one failed attempt, then parked
		parked = nil
		for _, p := range decode[[]api.ParkedEvent](t, requireOK(t, ctl(t, "events", "failed", "-o", "json"))) {
			if p.ID == id {
				parked = append(parked, p)
			}
		}
		return len(parked) == 1
	}, 15*time.Second, 100*time.Millisecond)
	assert.Equal(t, "FAILED", parked[0].Status)
	assert.Equal(t, code, parked[0].VoucherCode)
	r = requireOK(t, ctl(t, "events", "failed"))
	assert.Regexp(t, `(?m)^ID\s+VOUCHER\s+TYPE\s+SINK\s+STATUS`, r.stdout)

	idArg := strconv.FormatInt(id, 10)
	assert.Equal(t, exitUsage, ctl(t, "events", "retry", idArg).code, "no --yes, no terminal")
	assert.Equal(t, exitAborted, ctlAt(t, typed(""), "events", "retry", idArg).code)
	retried := decode[[]api.ParkedEvent](t, requireOK(t, ctl(t, "events", "retry", idArg, "--yes", "-o", "json")))
	require.Len(t, retried, 1)
	assert.Equal(t, id, retried[0].ID)
	assert.Equal(t, parked[0].Sink, retried[0].Sink)
	r = ctl(t, "events", "retry", "999999999", "--yes")
	assert.Equal(t, exitRefused, r.code)
	assert.Contains(t, r.stderr, voucher.CodeNotFound)
}

// TestEventsTailHeader: a table's header comes with the first answer, before
// any event is readable (an event becomes readable once the watermark passes
// it, about a second after its commit): the operator sees at once that the
// tail runs, and a voucher with no event yet shows the header alone.
func TestEventsTailHeader(t *testing.T) {
	t.Parallel()
	r := requireOK(t, ctl(t, "events", "tail", "--voucher", httpxtest.NewCode(t, 8)))
	assert.Regexp(t, `^ID\s+OCCURRED\s+VOUCHER\s+TYPE\s+DATA\n$`, r.stdout)
	r = requireOK(t, ctl(t, "events", "tail", "--voucher", httpxtest.NewCode(t, 8), "-o", "json"))
	assert.Empty(t, r.stdout, "JSON Lines have no header")
}
