package devstack

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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

// Redis is a running redis-server child process. Stop shuts it down and removes its temp
// dir (a Dir given in RedisOptions is kept); Kill keeps the dir so that Restart, on the
// same port, recovers what the append-only file holds.
type Redis struct {
	Addr string // 127.0.0.1:PORT

	bin     string
	aof     bool
	args    []string
	port    int
	dir     string
	tempDir bool // dir is ours to remove

	lifecycle
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
	r.lifecycle = lifecycle{
		name:  func() string { return "redis-server " + r.Addr },
		run:   r.start,
		sig:   syscall.SIGTERM,
		grace: redisStopGrace,
		kept:  "its dir",
	}
	if r.tempDir {
		r.clean = removeDir("redis dir", r.dir)
	}
	err = startOnPort(opts.Port, func(port int) error {
		r.port, r.Addr = port, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		return r.launch()
	})
	if err != nil {
		if r.tempDir {
			os.RemoveAll(r.dir)
		}
		return nil, err
	}
	return r, nil
}

// URL returns redis://127.0.0.1:PORT/0.
func (r *Redis) URL() string { return "redis://" + r.Addr + "/0" }

// Dir returns the directory holding the server's log and, with AOF, its data.
func (r *Redis) Dir() string { return r.dir }

// start runs redis-server and waits until it is ready.
func (r *Redis) start() (*proc, error) {
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
	// With no --logfile, redis-server logs to stdout, which goes to redis.log.
	ready := func(p *proc) error { return pingRedis(r.Addr, p.pid()) }
	kill := func(p *proc) error { p.kill(); return nil }
	return startServer(cmd, r.Addr, filepath.Join(r.dir, "redis.log"), redisReadyTimeout, ready, kill)
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
