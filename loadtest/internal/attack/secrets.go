package attack

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/stack"
	"github.com/flashgate/flashgate/loadtest/internal/verify"
	"github.com/flashgate/flashgate/shared/api"
)

// webhookSecrets are what the secrets attack's webhook URLs carry in their
// query strings and user info: none may leave the ledger.
var webhookSecrets = []string{"SECRETCLOSED", "SECRET500", "hookuser", "hookpa55"}

// runSecrets runs a ledger whose two webhook URLs carry secrets (a token in
// the query string, user:pass@), one on a closed port and one answering 500,
// lets the first event be parked as failed by both, and sweeps every log
// line of the stack and every answer that shows a delivery's failure (the
// parked events, the feed, the metrics) for the secrets.
func runSecrets(ctx context.Context, cfg Config) (*Result, error) {
	res := &Result{Scenario: "secrets"}
	closed, err := stack.AddrOr("")
	if err != nil {
		return nil, err
	}
	failing, stop, err := serve500()
	if err != nil {
		return nil, err
	}
	defer stop()
	urls := "http://hookuser:hookpa55@" + closed + "/hook?token=SECRETCLOSED," +
		"http://hookuser:hookpa55@" + failing + "/hook?token=SECRET500"
	logs := &lockedBuffer{}
	cfg.ServiceLog = io.MultiWriter(cmpWriter(cfg.ServiceLog), logs)
	r, err := startRig(ctx, cfg, Auth{}, []string{"WEBHOOK_URLS=" + urls, "WEBHOOK_SECRET=attack-webhook-secret-0123",
		"WEBHOOK_MAX_ATTEMPTS=2", "WEBHOOK_BACKOFF=20ms", "WEBHOOK_BACKOFF_MAX=100ms", "WEBHOOK_TIMEOUT=2s", "LOG_LEVEL=debug"}, nil)
	if err != nil {
		return nil, err
	}
	open := true
	defer func() {
		if open {
			r.Close()
		}
	}()
	if err := r.bench.CreateVoucher(ctx, verify.VoucherSpec{Code: verify.NewCode("secret"), Stock: 10, PerUser: 1}); err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: 10 * time.Second}
	var failed answer
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if failed, err = call(ctx, client, http.MethodGet, r.st.LedgerURL+api.RouteEvents+"?status=failed", adminToken, nil); err != nil {
			return nil, err
		}
		if bytes.Count(failed.Body, []byte(`"status":"FAILED"`)) >= 2 {
			break
		}
	}
	parked := bytes.Count(failed.Body, []byte(`"status":"FAILED"`))
	swept := map[string]string{"GET /admin/events?status=failed": string(failed.Body)}
	for _, path := range []string{api.RouteEvents + "?status=retry", api.RouteEvents, api.MetricsPath} {
		a, err := call(ctx, client, http.MethodGet, r.st.LedgerURL+path, adminToken, nil)
		if err != nil {
			return nil, err
		}
		swept["GET "+path] = string(a.Body)
	}
	r.Close() // the services' last lines are in
	open = false
	swept["the stack's log"] = logs.String()
	lines := strings.Count(swept["the stack's log"], "\n")
	res.figure("webhook URLs with a token and user:pass@, one on a closed port, one answering 500: %d parked as failed; %d log lines and %d answers swept",
		parked, lines, len(swept)-1)
	refused, answered := bytes.Contains(failed.Body, []byte("connection refused")), bytes.Contains(failed.Body, []byte("500 Internal"))
	res.want("both failures parked, each saying why", parked >= 2 && refused && answered,
		"%d parked; last_error says connection refused: %v, 500: %v", parked, refused, answered)
	var leaks []string
	for what, text := range swept {
		for _, s := range webhookSecrets {
			if strings.Contains(text, s) {
				leaks = append(leaks, what+" shows "+s)
			}
		}
	}
	res.want("no secret in any log or answer", len(leaks) == 0 && lines > 0, "%d leaks %v", len(leaks), leaks)
	return res.finish(), nil
}

// serve500 serves 500 to every request on a free loopback port; stop closes it.
func serve500() (addr string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	})}
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), func() { srv.Close() }, nil
}

// lockedBuffer is a buffer the services write to from their goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// cmpWriter is w, or io.Discard when nil.
func cmpWriter(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
