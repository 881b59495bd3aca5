package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/loadtest/internal/verify"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/voucher"
)

// runClosed tries the ledger's side doors: started without a token (it must
// refuse, unless LEDGER_AUTH=off says so), with pprof on every interface (it
// must refuse), and its open /metrics read for a scheduled flash voucher's
// code (it must not be there).
func runClosed(ctx context.Context, cfg Config) (*Result, error) {
	res := &Result{Scenario: "ledger-closed"}
	r, err := startRig(ctx, cfg, Auth{}, nil, nil)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	// An empty variable reads as unset: the stack's token is taken away.
	_, _, tokenless := r.st.StartLedger("ledger-tokenless", "", "LEDGER_TOKEN=", "LEDGER_TOKENS=", "LEDGER_AUTH=")
	_, _, authOff := r.st.StartLedger("ledger-auth-off", "", "LEDGER_TOKEN=", "LEDGER_TOKENS=", "LEDGER_AUTH=off")
	res.want("a tokenless ledger refuses to start", tokenless != nil && authOff == nil,
		"without a token: %s; with LEDGER_AUTH=off: %s", refusedOrStarted(tokenless), refusedOrStarted(authOff))
	_, _, pprofOpen := r.st.StartLedger("ledger-pprof-open", "", "DEBUG_ADDR=0.0.0.0:0")
	_, _, pprofLoop := r.st.StartLedger("ledger-pprof-loopback", "", "DEBUG_ADDR=127.0.0.1:0")
	res.want("pprof off loopback refuses to start", pprofOpen != nil && pprofLoop == nil,
		"DEBUG_ADDR=0.0.0.0:0: %s; DEBUG_ADDR=127.0.0.1:0: %s", refusedOrStarted(pprofOpen), refusedOrStarted(pprofLoop))

	live := verify.VoucherSpec{Code: verify.NewCode("live"), Stock: 100, PerUser: 1, Flash: true}
	if err := r.bench.CreateVoucher(ctx, live); err != nil {
		return nil, err
	}
	scheduled := verify.NewCode("later")
	client := &http.Client{Timeout: 10 * time.Second}
	if err := createScheduled(ctx, client, r.st.LedgerURL, scheduled); err != nil {
		return nil, err
	}
	for _, code := range []string{live.Code, scheduled} {
		a, err := call(ctx, client, http.MethodPost, r.st.LedgerURL+api.Fill(api.RouteReconcile, code), adminToken, nil)
		if err != nil {
			return nil, err
		}
		res.figure("reconcile %s: %s", code, a)
	}
	page, err := call(ctx, client, http.MethodGet, r.st.LedgerURL+api.MetricsPath, "", nil)
	if err != nil {
		return nil, err
	}
	body := string(page.Body)
	res.figure("the ledger's /metrics without a token: %s, %d bytes; the live voucher's code %s",
		page, len(body), map[bool]string{true: "on it", false: "not on it"}[strings.Contains(body, live.Code)])
	res.want("no scheduled voucher's code on the ledger's open /metrics", page.Status == http.StatusOK && !strings.Contains(body, scheduled),
		"%d lines name %s", strings.Count(body, scheduled), scheduled)
	return res.finish(), nil
}

// createScheduled creates a flash voucher of code that starts in an hour.
func createScheduled(ctx context.Context, client *http.Client, ledger, code string) error {
	start := time.Now().UTC().Add(time.Hour).Truncate(time.Second)
	end, discount, minOrder, total, perUser, flash := start.Add(time.Hour), int64(load.DiscountAmount), int64(load.MinOrderAmount), 100, 1, true
	body, err := json.Marshal(voucher.NewVoucher{Code: &code, DiscountAmount: &discount, MinOrderAmount: &minOrder,
		TotalLimit: &total, PerUserLimit: &perUser, FlashSale: &flash, StartsAt: &start, EndsAt: &end})
	if err != nil {
		return err
	}
	a, err := call(ctx, client, http.MethodPost, ledger+api.RouteVouchers, adminToken, body)
	if err != nil {
		return err
	}
	if a.Status != http.StatusCreated {
		return fmt.Errorf("create the scheduled voucher %s: %s", code, a)
	}
	return nil
}
