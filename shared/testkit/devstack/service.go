package devstack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	serviceReadyTimeout = 15 * time.Second
	serviceStopGrace    = 10 * time.Second
	serviceTailLines    = 50
)

// OpenEdge is the environment entry that lets a throwaway stack's proxy start
// without a client token (PROXY_AUTH=off; the proxy logs a WARN): the tests,
// the demo and the load generators send none. A production proxy refuses to
// start without PROXY_TOKEN or PROXY_TOKENS.
const OpenEdge = "PROXY_AUTH=off"

// OpenLedger is OpenEdge for a throwaway stack's ledger started without a
// token (LEDGER_AUTH=off; the ledger logs a WARN). A production ledger
// refuses to start without LEDGER_TOKEN or LEDGER_TOKENS.
const OpenLedger = "LEDGER_AUTH=off"

// LedgerAuth is the environment entry that gives a throwaway ledger its
// credentials: LEDGER_TOKEN=token, or, with no token and no LEDGER_TOKENS in
// env (the rest of its environment), OpenLedger. A ledger refuses
// LEDGER_AUTH=off beside a token, and no token without it.
func LedgerAuth(token string, env []string) string {
	if token != "" {
		return "LEDGER_TOKEN=" + token
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "LEDGER_TOKENS=") && kv != "LEDGER_TOKENS=" {
			return "LEDGER_TOKEN="
		}
	}
	return OpenLedger
}

// Service is one of the project's own binaries (bin/ledger, bin/proxy) running as a
// child process. Stop sends SIGTERM and kills it after 10s; Kill sends SIGKILL, as a
// crash would; Restart runs it again with the same binary and environment.
type Service struct {
	Name string

	binary    string
	env       []string
	healthURL string
	out       *prefixWriter

	lifecycle
}

// StartService runs binary with os.Environ() plus env, copies its output to out with each
// line prefixed "[name] ", and waits until GET healthURL answers 200.
func StartService(name, binary string, env []string, healthURL string, out io.Writer) (*Service, error) {
	s := &Service{
		Name:      name,
		binary:    binary,
		env:       env,
		healthURL: healthURL,
		out:       &prefixWriter{prefix: "[" + name + "] ", w: out},
	}
	s.lifecycle = lifecycle{
		name:  func() string { return s.Name },
		run:   s.start,
		sig:   syscall.SIGTERM,
		grace: serviceStopGrace,
	}
	if err := s.launch(); err != nil {
		return nil, err
	}
	return s, nil
}

// Logs returns the last lines the service wrote, across restarts.
func (s *Service) Logs() string { return s.out.tail() }

// start runs the binary and waits until it is healthy.
func (s *Service) start() (*proc, error) {
	cmd := exec.Command(s.binary)
	cmd.Env = append(os.Environ(), s.env...)
	cmd.Stdout = s.out
	cmd.Stderr = s.out
	// A grandchild holding the output pipe must not block Wait forever.
	cmd.WaitDelay = time.Second
	p, err := startProc(cmd)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", s.Name, err)
	}
	client := &http.Client{Timeout: time.Second}
	if err := waitReady(p, serviceReadyTimeout, func() error { return checkHealth(client, s.healthURL, p.pid()) }); err != nil {
		p.kill()
		return nil, fmt.Errorf("start %s (%s): %w\n%s:\n%s", s.Name, s.binary, err, s.out.what(), s.out.tail())
	}
	return p, nil
}

// checkHealth passes when GET url answers 200 from the process pid: /healthz
// names its pid, so that a start never passes on another process that holds
// the port (the child then fails to bind and exits, and the start fails with
// its output).
func checkHealth(client *http.Client, url string, pid int) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var health struct {
		PID int `json:"pid"`
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := json.Unmarshal(body, &health); err != nil || health.PID != pid {
		return fmt.Errorf("GET %s was answered by another process (%q), not pid %d: is the port taken?", url, body, pid)
	}
	return nil
}

// prefixWriter writes each complete line to w behind prefix and keeps the last lines so
// a failed start can show them.
type prefixWriter struct {
	prefix string
	w      io.Writer

	mu      sync.Mutex
	partial []byte
	lines   []string // ring of the last serviceTailLines lines
}

func (pw *prefixWriter) Write(b []byte) (int, error) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	pw.partial = append(pw.partial, b...)
	var buf bytes.Buffer
	for {
		i := bytes.IndexByte(pw.partial, '\n')
		if i < 0 {
			break
		}
		line := string(pw.partial[:i])
		pw.partial = pw.partial[i+1:]
		buf.WriteString(pw.prefix)
		buf.WriteString(line)
		buf.WriteByte('\n')
		pw.lines = append(pw.lines, line)
		if len(pw.lines) > serviceTailLines {
			pw.lines = pw.lines[len(pw.lines)-serviceTailLines:]
		}
	}
	if buf.Len() > 0 {
		// Losing a copy of the output must not make the service's writes fail.
		_, _ = pw.w.Write(buf.Bytes())
	}
	return len(b), nil
}

// what names the tail for an error: "output", and the file that holds all
// of it when w is one.
func (pw *prefixWriter) what() string {
	if f, ok := pw.w.(interface{ Name() string }); ok && filepath.IsAbs(f.Name()) && !strings.HasPrefix(f.Name(), "/dev/") {
		return "output (all of it in " + f.Name() + ")"
	}
	return "output"
}

func (pw *prefixWriter) tail() string {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	lines := pw.lines
	if len(pw.partial) > 0 {
		lines = append(lines[:len(lines):len(lines)], string(pw.partial))
	}
	if len(lines) == 0 {
		return "(no output)"
	}
	return strings.Join(lines, "\n")
}
