package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/envconf"
)

// settingsWait bounds how long the proxy waits at start for a ledger to tell
// it its settings (a ledger starting beside it, a balancer between ledgers).
const settingsWait = 15 * time.Second

// checkLedgerSettings reads the ledger's settings at start and refuses (an
// envconf.ErrBadSetting: exit 2) a LEDGER_TIMEOUT at or above the ledger's
// HANGING_GRACE: a write the proxy still waits for could have its use freed
// by the ledger's reconciler, which takes an admission older than the grace
// for one whose write was lost. A ledger that answers nothing within
// settingsWait is an error too: the check cannot be skipped.
func checkLedgerSettings(ctx context.Context, l *LedgerClient, ledgerTimeout time.Duration, log *slog.Logger) error {
	grace, err := readLedgerSettings(ctx, l, log)
	if err != nil {
		return err
	}
	if ledgerTimeout >= grace {
		return fmt.Errorf("LEDGER_TIMEOUT (%s) must be below the ledger's HANGING_GRACE (%s): "+
			"a write still in flight could have its use freed by the reconciler: %w",
			ledgerTimeout, grace, envconf.ErrBadSetting)
	}
	log.Info("ledger settings agree", "ledger_timeout", ledgerTimeout.String(), "hanging_grace", grace.String())
	return nil
}

// readLedgerSettings asks the ledger for its HANGING_GRACE until it answers
// (up to settingsWait).
func readLedgerSettings(ctx context.Context, l *LedgerClient, log *slog.Logger) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, settingsWait)
	defer cancel()
	for {
		rep, err := l.Do(ctx, "settings", http.MethodGet, api.SettingsPath, nil)
		switch {
		case err == nil && rep.Status == http.StatusOK:
			var s api.LedgerSettings
			if err := json.Unmarshal(rep.Body, &s); err != nil {
				return 0, fmt.Errorf("ledger settings: %w", err)
			}
			return s.Grace()
		case err == nil && (rep.Status == http.StatusUnauthorized || rep.Status == http.StatusNotFound):
			// Not a passing fault: the token is wrong, or the ledger predates
			// the route (upgrade the ledgers before the proxies).
			return 0, fmt.Errorf("GET %s%s answered %d: the proxy cannot check LEDGER_TIMEOUT against the ledger's HANGING_GRACE: %w",
				l.base, api.SettingsPath, rep.Status, envconf.ErrBadSetting)
		case err == nil:
			err = fmt.Errorf("answered %d", rep.Status)
		}
		log.Warn("waiting for the ledger's settings", "ledger", l.base, "err", err)
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("read the ledger's settings from %s within %s: %w", l.base, settingsWait, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
