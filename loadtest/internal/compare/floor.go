package compare

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
)

// `loadtest floor` measures what an admitted request must cost each process
// at least, beside the real path: its share of one batched script call in
// Redis, of one batched HTTP call to the ledger, and one row with its share
// of one commit in Postgres, each with the client's side (the proxy's or the
// ledger's share). The HTTP exchange at the edge is compare's ceiling. Each
// lab sends one batch at a time, as one voucher's coalescer and group commit
// do, and reads the CPU of the server (started by this process) and of this
// process from /proc.

// floorLab is one lab: it sends batches of size claims for d and returns how
// many claims it sent; server names the process that served them.
type floorLab struct {
	name, client, server string
	run                  func(ctx context.Context, size int, d time.Duration) (int64, error)
	pid                  func() int
}

// FloorFigure is one lab at one batch size.
type FloorFigure struct {
	Lab      string  `json:"lab"`
	Batch    int     `json:"batch"`
	Rate     float64 `json:"claimsPerSecond"`
	ServerUs float64 `json:"serverUsPerClaim"`
	ClientUs float64 `json:"clientUsPerClaim"`
	Server   string  `json:"server"`
	Client   string  `json:"client"`
}

// measure runs lab at size for d and reads the CPU both sides used.
func (l floorLab) measure(ctx context.Context, size int, d time.Duration) (FloorFigure, error) {
	procs := load.Procs{"server": l.pid(), "client": os.Getpid()}
	t0 := load.ReadProcTimes(procs)
	n, err := l.run(ctx, size, d)
	t1 := load.ReadProcTimes(procs)
	if err != nil {
		return FloorFigure{}, fmt.Errorf("%s, batches of %d: %w", l.name, size, err)
	}
	us := load.PerRequestMicros(t1.Since(t0), n)
	return FloorFigure{Lab: l.name, Batch: size, Rate: float64(n) / t1.Wall(t0).Seconds(),
		ServerUs: us["server"], ClientUs: us["client"], Server: l.server, Client: l.client}, nil
}

// RunFloor is `loadtest floor`.
func RunFloor(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("floor", flag.ExitOnError)
	sizes := fs.String("batch", "1,8,16,64", "batch sizes, comma separated")
	d := fs.Duration("duration", 3*time.Second, "how long each lab sends at each batch size")
	durable := fs.Bool("durable", false, "Postgres with fsync and full_page_writes on")
	_ = fs.Parse(args)
	var batches []int
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("--batch %q: want positive sizes", *sizes)
		}
		batches = append(batches, n)
	}
	labs, stop, err := startFloorLabs(ctx, *durable)
	defer stop()
	if err != nil {
		return err
	}
	var figs []FloorFigure
	for _, lab := range labs {
		for _, size := range batches {
			f, err := lab.measure(ctx, size, *d)
			if err != nil {
				return err
			}
			fmt.Printf("  %-8s batch %3d: %8.0f claims/s, %s %s us, %s %s us per claim\n", f.Lab, size, f.Rate,
				f.Server, load.MicrosString(f.ServerUs), f.Client, load.MicrosString(f.ClientUs))
			figs = append(figs, f)
		}
	}
	writeFloorTable(os.Stdout, figs, *durable)
	return nil
}

// startFloorLabs starts Redis, Postgres and the ledger-like server, and
// returns the labs on them; stop stops what it started.
func startFloorLabs(ctx context.Context, durable bool) ([]floorLab, func(), error) {
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	rdb, err := devstack.StartRedis(devstack.RedisOptions{})
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, func() { _ = rdb.Stop() })
	pg, err := devstack.StartPostgres(devstack.PostgresOptions{Durable: durable})
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, func() { _ = pg.Stop() })
	srv, err := startChild("floor-ledger")
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, srv.Stop)
	script, closeRedis, err := redisFloor(rdb.URL())
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, closeRedis)
	rows, closePG, err := postgresFloor(ctx, pg.URL())
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, closePG)
	return []floorLab{
		{name: "redis", server: "redis-server", client: "go-redis (proxy)", run: script, pid: rdb.Pid},
		{name: "http", server: "gin (ledger)", client: "net/http (proxy)", run: httpFloor(srv.URL), pid: srv.pid},
		{name: "postgres", server: "postgres", client: "pgx (ledger)", run: rows, pid: pg.Pid},
	}, stop, nil
}

// writeFloorTable writes the figures as BENCHMARKS.md shows them.
func writeFloorTable(w io.Writer, figs []FloorFigure, durable bool) {
	fmt.Fprintf(w, "\nThe floor, CPU per claim in us (one batch in flight; Postgres %s):\n\n", map[bool]string{true: "durable", false: "fsync off"}[durable])
	fmt.Fprintln(w, "| lab | batch | claims/s | server | server us | client | client us |")
	fmt.Fprintln(w, "| --- | ---: | ---: | --- | ---: | --- | ---: |")
	for _, f := range figs {
		fmt.Fprintf(w, "| %s | %d | %.0f | %s | %s | %s | %s |\n", f.Lab, f.Batch, f.Rate, f.Server,
			load.MicrosString(f.ServerUs), f.Client, load.MicrosString(f.ClientUs))
	}
}
