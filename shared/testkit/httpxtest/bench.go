package httpxtest

import (
	"bytes"
	"net/http"
	"net/url"
	"testing"
)

// BenchServe runs h on the same POST of body to path b.N times, in process
// (no network), and fails unless every answer has status want. The request,
// its body reader and the response writer are reused, so allocs/op counts
// what the handler chain allocates, nothing of the benchmark's own.
func BenchServe(b *testing.B, h http.Handler, path string, body []byte, want int) {
	b.Helper()
	u, err := url.Parse(path)
	if err != nil {
		b.Fatal(err)
	}
	rd := bytes.NewReader(body)
	req := &http.Request{Method: http.MethodPost, URL: u, RequestURI: path, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: readCloser{rd},
		ContentLength: int64(len(body)), Host: "bench", RemoteAddr: "127.0.0.1:1"}
	req = req.WithContext(b.Context())
	w := &benchWriter{h: http.Header{}}
	serve := func() {
		rd.Reset(body)
		clear(w.h)
		w.status = 0
		h.ServeHTTP(w, req)
		if w.status != want {
			b.Fatalf("POST %s = %d, want %d", path, w.status, want)
		}
	}
	serve() // the first answer fills caches and pools
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		serve()
	}
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// benchWriter is a ResponseWriter that keeps the status and drops the body.
type benchWriter struct {
	h      http.Header
	status int
}

func (w *benchWriter) Header() http.Header { return w.h }

func (w *benchWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *benchWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return len(p), nil
}
