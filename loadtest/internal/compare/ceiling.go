package compare

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/httpx/decode"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/voucher"
)

// ceilingHandler is the HTTP ceiling: a bare gin engine that decodes and
// validates the reserve body exactly as the proxy does and answers a fixed 409
// OUT_OF_STOCK. No middleware, no Redis, no ledger: nothing the proxy does on
// its fastest path (the sold-out flag) can be cheaper than this. gin's mode is
// the caller's to set (RunCeiling sets release mode).
func ceilingHandler() http.Handler {
	r := gin.New()
	r.GET(api.HealthzPath, func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	r.POST(api.ReservationsPath(":code"), func(c *gin.Context) {
		if _, err := decode.BindClaim(c); err != nil {
			httpx.WriteError(c, err)
			return
		}
		e := voucher.ErrOutOfStock
		c.JSON(http.StatusConflict, api.ErrorBody{Error: e.Code, Message: e.Message})
	})
	return r
}

// RunCeiling is `loadtest ceiling`: the ceiling server in the foreground until
// SIGINT or SIGTERM.
func RunCeiling(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("ceiling", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:8090", "listen address")
	_ = fs.Parse(args)

	gin.SetMode(gin.ReleaseMode)
	return serveUntil(ctx, "ceiling", *addr, ceilingHandler())
}

// serveUntil serves h on addr until ctx ends (SIGINT or SIGTERM).
func serveUntil(ctx context.Context, name, addr string, h http.Handler) error {
	srv := httpx.NewServer(addr, h)
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	fmt.Fprintf(os.Stderr, "%s listening on %s\n", name, addr)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shut)
}

// ceilingProcess is `loadtest ceiling` (or another server of this binary:
// solution1) running as a child of this process, so that it has its own
// runtime and scheduler like the proxy has.
type ceilingProcess struct {
	URL  string
	cmd  *exec.Cmd
	done chan struct{}
}

// startCeiling runs this executable's ceiling command on a free port and waits
// until it answers.
func startCeiling() (*ceilingProcess, error) { return startChild("ceiling") }

// startChild runs this executable's command (a server taking --addr) with
// args on a free port and waits until its /healthz answers.
func startChild(command string, args ...string) (*ceilingProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	port, err := devstack.FreePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p := &ceilingProcess{URL: "http://" + addr, done: make(chan struct{})}
	p.cmd = exec.Command(exe, append([]string{command, "--addr", addr}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = os.Stderr, os.Stderr
	// Killed with this process. Linux sends Pdeathsig when the thread that
	// forked the child exits, so that thread is held until the child is gone.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := p.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = p.cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", command, err)
	}
	client := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, err := client.Get(p.URL + api.HealthzPath)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("%s exited before it answered", command)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("%s did not answer on %s", command, addr)
		}
	}
}

// pid is the server's process id, for reading its CPU time.
func (p *ceilingProcess) pid() int { return p.cmd.Process.Pid }

// Stop sends SIGTERM and kills the process if it has not exited after 5 s.
func (p *ceilingProcess) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
