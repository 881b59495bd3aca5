package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/client"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
	"github.com/flashgate/flashgate/shared/voucher"
)

// saleDayDoc and saleDayHeading name the section of the operator's docs whose
// first ```sh block this test runs.
const (
	saleDayDoc     = "../docs/operations.md"
	saleDayHeading = "## A sale day with flashgatectl"
)

// runEnv is the block's first line: after `make run`, it sources the file that
// names the stack's ledger and token. The test writes that file for its own
// stack, and each later line runs after it, as in the operator's shell.
const runEnv = ". bin/run.env"

// crowdMarker is the comment line of the block at which the sale's customers
// buy: the test reserves crowdOrders orders through the proxy there, confirms
// all but the last two, and cancels one of those, so that the commands after
// it have orders to list, export and reconcile.
const (
	crowdMarker = "# ... the crowd buys through the proxies ..."
	crowdOrders = 5
)

// saleDayCode is the voucher the docs' sale day drives; the test gives it
// a fresh code per run, so that it runs beside the other tests on one stack.
const saleDayCode = "SALE100"

// TestDocsSaleDay runs the operator docs' sale day, command by command in its
// order, through the built binary in bash (no terminal, so the changes need
// their --yes), in a directory whose bin/ holds bin/flashgatectl and the
// bin/run.env that `make run` would write for this test's stack. Each line
// must exit 0, and the day must end as the section says.
func TestDocsSaleDay(t *testing.T) {
	t.Parallel()
	commands := saleDayCommands(t, saleDayDoc)
	require.NotEmpty(t, commands)
	require.Equal(t, runEnv, commands[0], "the block starts by sourcing what make run wrote")
	bin := devstacktest.Binaries(t, "github.com/flashgate/flashgate/flashgatectl")
	code := httpxtest.NewCode(t, 8)
	requireAgreementAtEnd(t, code)
	dir := t.TempDir()
	writeRunEnv(t, dir, filepath.Join(bin, "flashgatectl"))
	env := os.Environ()
	for _, line := range commands[1:] {
		if line == crowdMarker {
			crowdBuys(t, code)
			continue
		}
		require.True(t, strings.HasPrefix(line, "bin/flashgatectl "), "the section's lines are bin/flashgatectl commands: %q", line)
		line = strings.ReplaceAll(line, saleDayCode, code)
		cmd := exec.CommandContext(t.Context(), "bash", "-e", "-o", "pipefail", "-c", runEnv+"\n"+line)
		cmd.Env, cmd.Dir = env, dir
		out, err := cmd.CombinedOutput()
		t.Logf("$ %s\n%s", line, out)
		require.NoError(t, err, "%s\n%s", line, out)
	}

	v := getVoucher(t, code)
	assert.Equal(t, 1500, v.TotalLimit, "the day raised the limit")
	assert.Equal(t, int64(50_000), v.DiscountAmount, "and fixed the price")
	assert.False(t, v.Paused, "and sells again")
	assert.Equal(t, voucher.StateLive, v.State)
	assert.Equal(t, crowdOrders-2, v.ConfirmedCount)
	assert.Equal(t, crowdOrders-1, v.UsedCount)
	csv, err := os.ReadFile(filepath.Join(dir, code+".csv"))
	require.NoError(t, err, "the day exported the orders")
	assert.True(t, strings.HasPrefix(string(csv), "order_id,customer_id,status,"))
	assert.Equal(t, 1+crowdOrders, strings.Count(string(csv), "\n"), "a header and a row per order")
}

// writeRunEnv gives dir what `make run` leaves in the checkout: bin/flashgatectl
// and bin/run.env, naming this test's stack.
func writeRunEnv(t *testing.T, dir, flashgatectl string) {
	t.Helper()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "bin"), 0o755))
	require.NoError(t, os.Symlink(flashgatectl, filepath.Join(dir, "bin", "flashgatectl")))
	vars := fmt.Sprintf("export FLASHGATE_PROXY=%s\nexport %s=%s\nexport %s=%s\n",
		stack.ProxyURL, envLedger, stack.LedgerURL, envToken, ledgerToken)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bin", "run.env"), []byte(vars), 0o600))
}

// crowdBuys is the sale's customers at crowdMarker, through the proxy.
func crowdBuys(t *testing.T, code string) {
	t.Helper()
	shop := client.New(stack.ProxyURL) // the stack's edge is open
	for i := range crowdOrders {
		order := fmt.Sprintf("%s-order-%d", code, i)
		_, err := shop.Reserve(t.Context(), code, voucher.Claim{CustomerID: int64(1000 + i), OrderID: order, OrderAmount: 750_000})
		require.NoError(t, err)
		switch {
		case i < crowdOrders-2:
			_, err = shop.Confirm(t.Context(), code, order)
		case i == crowdOrders-1:
			err = shop.Release(t.Context(), code, order)
		}
		require.NoError(t, err)
	}
	t.Logf("%s: %d orders reserved through the proxy, %d confirmed, 1 cancelled", crowdMarker, crowdOrders, crowdOrders-2)
}

// saleDayCommands reads the first ```sh block after saleDayHeading in doc: its
// commands, continuation lines joined, trailing comments and comment lines
// dropped but crowdMarker.
func saleDayCommands(t *testing.T, doc string) []string {
	t.Helper()
	f, err := os.Open(doc)
	require.NoError(t, err)
	defer f.Close()
	var commands []string
	var inSection, inBlock bool
	var pending string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !inSection:
			inSection = line == saleDayHeading
		case !inBlock && strings.HasPrefix(line, "#"):
			t.Fatalf("%s has no ```sh block before the next heading %q", saleDayHeading, line)
		case !inBlock:
			inBlock = line == "```sh"
		case line == "```":
			require.Empty(t, pending, "the block ends inside a continued command")
			return commands
		default:
			if cont, ok := strings.CutSuffix(line, `\`); ok {
				pending += cont
				continue
			}
			line = strings.TrimSpace(pending + line)
			pending = ""
			if before, _, ok := strings.Cut(line, "   # "); ok {
				line = strings.TrimSpace(before) // a comment after the command
			}
			if line == crowdMarker || line != "" && !strings.HasPrefix(line, "#") {
				commands = append(commands, line)
			}
		}
	}
	require.NoError(t, sc.Err())
	t.Fatalf("%s has no %q section with a ```sh block", doc, saleDayHeading)
	return nil
}
