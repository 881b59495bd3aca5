package httpxtest

import (
	"bytes"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/flashgate/flashgate/shared/api"
)

// LogBuffer collects a service's log output for a test: an io.Writer safe for
// concurrent writes (a slog handler, or a child process's output copier).
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p; it never fails.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines returns the lines written so far that contain s.
func (b *LogBuffer) Lines(s string) []string {
	var out []string
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// RequestIDClient returns a client that sends X-Request-ID: id with every
// request, so that a test can find the lines its requests left in a log.
func RequestIDClient(id string) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: requestIDTransport(id)}
}

type requestIDTransport string

func (id requestIDTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(api.HeaderRequestID, string(id))
	return http.DefaultTransport.RoundTrip(r)
}
