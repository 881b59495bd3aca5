package devstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// pgUser is the superuser initdb creates; trust auth means no password.
	pgUser = "postgres"
	// pgDatabase is the database StartPostgres creates and URL names.
	pgDatabase = "flashgate"

	pgReadyTimeout = 15 * time.Second
	pgStopGrace    = 30 * time.Second
)

// PostgresOptions configures StartPostgres.
type PostgresOptions struct {
	Durable bool // fsync and full_page_writes on; off by default for speed
	Port    int  // 0 picks a free port
	// Settings are more server settings, "name=value" each (postgres -c),
	// for example shared_preload_libraries=pg_stat_statements.
	Settings []string
}

// Postgres is a running PostgreSQL child process. Stop does a fast shutdown (open
// transactions roll back) and removes the data dir; Kill sends SIGKILL to the postmaster
// and its backends and keeps the data, so that Restart, on the same port, runs crash
// recovery.
type Postgres struct {
	Addr string // 127.0.0.1:PORT

	bins     pgBinaries
	cred     *syscall.Credential // nil: run as this user
	durable  bool
	settings []string
	port     int
	base     string // temp dir holding data/, sock/ and postgres.log

	lifecycle // its proc is the postmaster
}

// StartPostgres runs initdb into a temp dir, starts postgres on 127.0.0.1 and waits
// until the database "flashgate" accepts connections.
//
// Unless Durable is set, fsync and full_page_writes are off: data survives Kill (the
// kernel still has it) but not a machine crash. synchronous_commit stays on, so commit
// latency still includes the WAL write.
func StartPostgres(opts PostgresOptions) (*Postgres, error) {
	bins, err := findPostgres()
	if err != nil {
		return nil, err
	}
	cred, err := pgCredential()
	if err != nil {
		return nil, err
	}
	p := &Postgres{bins: bins, cred: cred, durable: opts.Durable, settings: opts.Settings}
	p.lifecycle = lifecycle{
		name:  func() string { return "postgres " + p.Addr },
		run:   p.start,
		sig:   syscall.SIGINT, // fast shutdown: returns once every backend has exited
		grace: pgStopGrace,
		kill:  p.killAll,
		kept:  "its data",
	}
	if err := p.initdb(); err != nil {
		if p.base != "" {
			os.RemoveAll(p.base)
		}
		return nil, err
	}
	p.clean = removeDir("postgres dir", p.base)
	err = startOnPort(opts.Port, func(port int) error {
		p.port, p.Addr = port, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		return p.launch()
	})
	if err != nil {
		os.RemoveAll(p.base)
		return nil, err
	}
	return p, nil
}

// URL returns a connection string for the database "flashgate".
func (p *Postgres) URL() string {
	return p.url(pgDatabase)
}

// DataDir returns the cluster's data directory.
func (p *Postgres) DataDir() string { return filepath.Join(p.base, "data") }

func (p *Postgres) url(database string) string {
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", pgUser, p.Addr, database)
}

func (p *Postgres) sockDir() string { return filepath.Join(p.base, "sock") }
func (p *Postgres) logPath() string { return filepath.Join(p.base, "postgres.log") }

// initdb creates the base dir and a fresh cluster in it.
func (p *Postgres) initdb() error {
	base, err := os.MkdirTemp(tempParent(), "devstack-pg-*")
	if err != nil {
		return fmt.Errorf("postgres dir: %w", err)
	}
	p.base = base
	// The server may run as another user, who must reach data/ and sock/ inside.
	if err := os.Chmod(base, 0o755); err != nil {
		return fmt.Errorf("postgres dir: %w", err)
	}
	for dir, mode := range map[string]os.FileMode{p.DataDir(): 0o700, p.sockDir(): 0o755} {
		if err := os.Mkdir(dir, mode); err != nil {
			return fmt.Errorf("postgres dir: %w", err)
		}
		if p.cred != nil {
			if err := os.Chown(dir, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
				return fmt.Errorf("postgres dir: %w", err)
			}
		}
	}
	cmd := exec.Command(p.bins.initdb,
		"-D", p.DataDir(),
		"--no-sync", "--no-instructions",
		"-A", "trust", "-U", pgUser,
		"-E", "UTF8", "--locale=C",
	)
	p.asServerUser(cmd)
	if out, err := run(cmd); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, lastLines(string(out), 25))
	}
	return nil
}

// start runs the postmaster, waits until it accepts connections and creates the
// flashgate database if needed.
func (p *Postgres) start() (*proc, error) {
	args := []string{
		"-D", p.DataDir(),
		"-p", strconv.Itoa(p.port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=" + p.sockDir(),
		"-c", "max_connections=300",
	}
	if !p.durable {
		args = append(args, "-c", "fsync=off", "-c", "full_page_writes=off")
	}
	for _, set := range p.settings {
		args = append(args, "-c", set)
	}
	cmd := exec.Command(p.bins.postgres, args...)
	p.asServerUser(cmd)
	ready := func(*proc) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return p.createDatabase(ctx)
	}
	return startServer(cmd, p.Addr, p.logPath(), pgReadyTimeout, ready, p.killAll)
}

// createDatabase connects to the maintenance database and creates flashgate unless it
// exists. It fails while the server is still starting or recovering, or when the server
// on the port is not this one.
func (p *Postgres) createDatabase(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, p.url("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	// Another server may have taken the port first.
	var dataDir string
	if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&dataDir); err != nil {
		return err
	}
	if dataDir != p.DataDir() {
		return fmt.Errorf("%s is answered by the server of %s", p.Addr, dataDir)
	}
	var exists bool
	err = conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", pgDatabase).Scan(&exists)
	if err != nil || exists {
		return err
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgDatabase)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database
		return nil
	}
	return err
}

// asServerUser makes cmd run in the base dir as the user the server runs as.
func (p *Postgres) asServerUser(cmd *exec.Cmd) {
	cmd.Dir = p.base
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
}

// killAll kills the postmaster and its backends and waits until they are gone. Backends
// would exit on their own once the postmaster dies, but a restart fails while any still
// holds the old shared memory.
func (p *Postgres) killAll(pm *proc) error {
	if !pm.running() {
		return nil
	}
	children := childPids(pm.pid())
	pm.kill()
	for _, pid := range children {
		syscall.Kill(pid, syscall.SIGKILL) // ESRCH: already gone
	}
	if !waitGone(children, 10*time.Second) {
		return fmt.Errorf("kill postgres %s: backends still running after SIGKILL", p.Addr)
	}
	return nil
}

// childPids returns the processes whose parent is ppid.
func childPids(ppid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if parent, _, ok := procStat(pid); ok && parent == ppid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitGone waits until none of pids is running; a zombie left for init counts as gone.
func waitGone(pids []int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		alive := false
		for _, pid := range pids {
			if _, state, ok := procStat(pid); ok && state != 'Z' && state != 'X' {
				alive = true
				break
			}
		}
		if !alive {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// procStat reads the parent pid and state of pid from /proc/PID/stat.
func procStat(pid int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 2 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(fields[1])
	if err != nil || len(fields[0]) == 0 {
		return 0, 0, false
	}
	return ppid, fields[0][0], true
}
