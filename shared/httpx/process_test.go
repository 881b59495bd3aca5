package httpx

import (
	"io"
	"log/slog"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestProcessStopsAtSIGTERM: a Process serves until SIGTERM, then drains and
// returns from Serve with Stopping done; Close releases the listener.
func TestProcessStopsAtSIGTERM(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	p, err := Start("test", "TEST_ADDR", "127.0.0.1:0", Serving{Shutdown: Shutdown{Timeout: 10 * time.Second}}, log)
	require.NoError(t, err)
	url := "http://" + p.lns.Main.Addr().String() + "/"
	served := make(chan error, 1)
	go func() {
		served <- p.Serve(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	}()
	require.Eventually(t, func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, "serves")
	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGTERM))
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return after SIGTERM")
	}
	require.Error(t, p.Stopping().Err(), "Stopping is done")
	require.ErrorIs(t, p.Err(), ErrStopping)
	p.Close()
	_, err = http.Get(url)
	require.Error(t, err, "the listener is closed")
}
