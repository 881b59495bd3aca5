package ledger

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

// settingsWarnEvery spaces the WARN lines of a start that waits for its
// ledger: one every few seconds says it waits and why, not one per attempt.
const settingsWarnEvery = 5 * time.Second

// CheckSettings reads the ledger's settings at start and refuses (an
// envconf.ErrBadSetting: exit 2) a LEDGER_TIMEOUT at or above the ledger's
// HANGING_GRACE: a write the proxy still waits for could have its use freed
// by the ledger's reconciler, which takes an admission older than the grace
// for one whose write was lost. A ledger that answers nothing within wait
// (LEDGER_START_WAIT) stops the start too: the check cannot be skipped.
func CheckSettings(ctx context.Context, l *Client, ledgerTimeout, wait time.Duration, log *slog.Logger) error {
	grace, err := readLedgerSettings(ctx, l, wait, log)
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

// readLedgerSettings asks the ledger for its HANGING_GRACE until it answers,
// for up to wait (a ledger starting beside the proxy). Each error names the
// setting to look at: LEDGER_TOKEN when the ledger refuses it (not retried),
// LEDGER_URL with the last cause when no ledger answered.
func readLedgerSettings(ctx context.Context, l *Client, wait time.Duration, log *slog.Logger) (time.Duration, error) {
	waiting, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	start := time.Now()
	var lastErr error
	var warned time.Time
	for {
		rep, err := l.probe(waiting, api.SettingsPath)
		switch {
		case err == nil && rep.Status == http.StatusOK:
			var s api.LedgerSettings
			if err := json.Unmarshal(rep.Body, &s); err != nil {
				return 0, fmt.Errorf("ledger settings: %w", err)
			}
			return s.Grace()
		case err == nil && (rep.Status == http.StatusUnauthorized || rep.Status == http.StatusForbidden):
			return 0, fmt.Errorf("LEDGER_TOKEN is refused by the ledger at LEDGER_URL=%s (GET %s answered %d): %w",
				l.base, api.SettingsPath, rep.Status, envconf.ErrBadSetting)
		case err == nil && rep.Status == http.StatusNotFound:
			return 0, fmt.Errorf("LEDGER_URL=%s answered GET %s 404: not a ledger, or one older than the proxy (upgrade the ledgers first): %w",
				l.base, api.SettingsPath, envconf.ErrBadSetting)
		case err == nil:
			err = fmt.Errorf("GET %s answered %d", api.SettingsPath, rep.Status)
		}
		if waiting.Err() == nil || lastErr == nil {
			lastErr = err // not the deadline that cut the last attempt
		}
		if ctx.Err() != nil {
			return 0, fmt.Errorf("stopped while waiting for the ledger at LEDGER_URL=%s: %w", l.base, lastErr)
		}
		if time.Since(warned) >= settingsWarnEvery {
			log.Warn("waiting for the ledger at LEDGER_URL", "ledger", l.base, "err", err,
				"gives_up_in", (wait - time.Since(start)).Round(time.Second).String())
			warned = time.Now()
		}
		select {
		case <-waiting.Done():
			return 0, fmt.Errorf("LEDGER_URL=%s: no ledger answered within LEDGER_START_WAIT (%s): %w: %w",
				l.base, wait, lastErr, envconf.ErrBadSetting)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
