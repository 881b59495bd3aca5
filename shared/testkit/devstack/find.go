package devstack

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// pgLibDir is where Debian and Ubuntu install each PostgreSQL major version.
const pgLibDir = "/usr/lib/postgresql"

// findRedis returns the path of redis-server.
func findRedis() (string, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return "", errors.New("devstack: redis-server not found in PATH; " +
			"install it with `apt-get install -y redis-server` (or run scripts/deps.sh)")
	}
	return path, nil
}

// pgBinaries are the two PostgreSQL programs devstack runs.
type pgBinaries struct {
	initdb   string
	postgres string
}

// findPostgres returns initdb and postgres from PATH, or else from the highest version
// under /usr/lib/postgresql, where Debian keeps them out of PATH.
func findPostgres() (pgBinaries, error) {
	initdb, err1 := exec.LookPath("initdb")
	postgres, err2 := exec.LookPath("postgres")
	if err1 == nil && err2 == nil {
		return pgBinaries{initdb: initdb, postgres: postgres}, nil
	}
	dirs, _ := filepath.Glob(filepath.Join(pgLibDir, "*", "bin"))
	slices.SortFunc(dirs, func(a, b string) int {
		return -compareVersions(filepath.Base(filepath.Dir(a)), filepath.Base(filepath.Dir(b)))
	})
	for _, dir := range dirs {
		bins := pgBinaries{initdb: filepath.Join(dir, "initdb"), postgres: filepath.Join(dir, "postgres")}
		if isExecutable(bins.initdb) && isExecutable(bins.postgres) {
			return bins, nil
		}
	}
	return pgBinaries{}, fmt.Errorf("devstack: PostgreSQL server (initdb, postgres) not found in PATH or %s/*/bin; "+
		"install it with `apt-get install -y postgresql` (or run scripts/deps.sh)", pgLibDir)
}

// compareVersions orders dotted version strings numerically ("9.6" < "15").
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x - y
		}
	}
	return 0
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// pgCredential returns who initdb and postgres run as: nil (this user) unless this
// process is root, which PostgreSQL refuses to run as; then the "postgres" user if the
// system has one, else "nobody".
func pgCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	var lastErr error
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			lastErr = err
			continue
		}
		uid, err := strconv.ParseUint(u.Uid, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("user %s: uid %q: %w", name, u.Uid, err)
		}
		gid, err := strconv.ParseUint(u.Gid, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("user %s: gid %q: %w", name, u.Gid, err)
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, fmt.Errorf("devstack: running as root and found no postgres or nobody user to run PostgreSQL as: %w", lastErr)
}

// tempParent returns a directory under which another user can reach what root creates:
// os.TempDir() when every directory on its path is world-searchable, else /tmp.
func tempParent() string {
	dir := os.TempDir()
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil || fi.Mode()&0o001 == 0 {
			return "/tmp"
		}
		if d == filepath.Dir(d) {
			return dir
		}
	}
}
