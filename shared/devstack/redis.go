package devstack

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	redisReadyTimeout = 10 * time.Second
	redisStopGrace    = 10 * time.Second
)

// RedisOptions configures StartRedis.
type RedisOptions struct {
	AOF  bool     // appendonly yes, appendfsync everysec
	Port int      // 0 picks a free port
	Dir  string   // "" makes a temp dir that Stop removes
	Args []string // more redis-server arguments, e.g. --cluster-enabled yes
}

// Redis is a running redis-server child process.
type Redis struct {
	Addr string // 127.0.0.1:PORT

	bin     string
	aof     bool
	args    []string
	port    int
	dir     string
	tempDir bool // dir is ours to remove

	mu      sync.Mutex
	proc    *proc
	removed bool // Stop removed dir; nothing left to restart
}

// StartRedis starts redis-server and waits until it answers PING.
func StartRedis(opts RedisOptions) (*Redis, error) {
	bin, err := findRedis()
	if err != nil {
		return nil, err
	}
	r := &Redis{bin: bin, aof: opts.AOF, args: opts.Args, dir: opts.Dir}
	if r.dir == "" {
		if r.dir, err = os.MkdirTemp("", "devstack-redis-*"); err != nil {
			return nil, fmt.Errorf("redis dir: %w", err)
		}
		r.tempDir = true
	} else if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, fmt.Errorf("redis dir: %w", err)
	}
	for attempt := 1; ; attempt++ {
		r.port = opts.Port
		if r.port == 0 {
			if r.port, err = FreePort(); err != nil {
				break
			}
		}
		r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port))
		if err = r.start(); err == nil {
			return r, nil
		}
		if opts.Port != 0 || attempt == startAttempts || !errors.Is(err, errAddrInUse) {
			break
		}
	}
	if r.tempDir {
		os.RemoveAll(r.dir)
	}
	return nil, err
}

// URL returns redis://127.0.0.1:PORT/0.
func (r *Redis) URL() string { return "redis://" + r.Addr + "/0" }

// Dir returns the directory holding the server's log and, with AOF, its data.
func (r *Redis) Dir() string { return r.dir }

// Stop shuts the server down and removes its temp dir. A Dir given in RedisOptions is
// kept. Stop is idempotent.
func (r *Redis) Stop() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var err error
	if r.proc != nil {
		if err = r.proc.stop(syscall.SIGTERM, redisStopGrace); err != nil {
			err = fmt.Errorf("stop redis-server %s: %w", r.Addr, err)
		}
	}
	if r.tempDir && !r.removed {
		if rmErr := os.RemoveAll(r.dir); rmErr != nil && err == nil {
			err = fmt.Errorf("remove redis dir: %w", rmErr)
		}
		r.removed = true
	}
	return err
}

// Kill sends SIGKILL, as a crash would, and keeps the dir so Restart can recover what
// the append-only file holds.
func (r *Redis) Kill() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc != nil {
		r.proc.kill()
	}
	return nil
}

// Restart starts the server again on the same port and dir and waits for PING. A running
// server is shut down first.
func (r *Redis) Restart() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.removed {
		return fmt.Errorf("restart redis-server %s: stopped and its dir removed", r.Addr)
	}
	if r.proc != nil {
		if err := r.proc.stop(syscall.SIGTERM, redisStopGrace); err != nil {
			return fmt.Errorf("restart redis-server %s: %w", r.Addr, err)
		}
	}
	return r.start()
}

// start runs redis-server and waits until it is ready. r.mu is held or r is unshared.
func (r *Redis) start() error {
	logPath := filepath.Join(r.dir, "redis.log")
	logFrom := logSize(logPath)
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("redis log: %w", err)
	}
	defer logFile.Close() // the child holds its own descriptor

	appendonly := "no"
	args := []string{
		"--port", strconv.Itoa(r.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--dir", r.dir,
		"--daemonize", "no",
		"--protected-mode", "no",
	}
	if r.aof {
		appendonly = "yes"
		args = append(args, "--appendfsync", "everysec")
	}
	args = append(args, "--appendonly", appendonly)
	args = append(args, r.args...)
	cmd := exec.Command(r.bin, args...)
	cmd.Dir = r.dir
	cmd.Stdout = logFile // with no --logfile, redis-server logs to stdout
	cmd.Stderr = logFile
	p, err := startProc(cmd)
	if err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	if err := waitReady(p, redisReadyTimeout, func() error { return pingRedis(r.Addr, p.pid()) }); err != nil {
		p.kill()
		tail := logTail(logPath, logFrom)
		if strings.Contains(tail, "Address already in use") {
			err = fmt.Errorf("%w: %w", errAddrInUse, err)
		}
		return fmt.Errorf("start redis-server on %s: %w\nredis.log:\n%s", r.Addr, err, tail)
	}
	r.proc = p
	return nil
}

// pingRedis checks that the server at addr answers PING with PONG (a server still loading
// its append-only file answers -LOADING) and that it is the process with the given pid,
// not another server that took the port first.
func pingRedis(addr string, pid int) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	if _, err := conn.Write([]byte("PING\r\nINFO server\r\n")); err != nil {
		return err
	}
	rd := bufio.NewReader(conn)
	line, err := rd.ReadString('\n')
	if err != nil {
		return err
	}
	if reply := strings.TrimSpace(line); reply != "+PONG" {
		return fmt.Errorf("PING answered %q", reply)
	}
	line, err = rd.ReadString('\n')
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(line), "$"))
	if err != nil {
		return fmt.Errorf("INFO answered %q", line)
	}
	info := make([]byte, n)
	if _, err := io.ReadFull(rd, info); err != nil {
		return err
	}
	want := "process_id:" + strconv.Itoa(pid) + "\r\n"
	if !strings.Contains(string(info), want) {
		return fmt.Errorf("%s is answered by another redis-server, not pid %d", addr, pid)
	}
	return nil
}
