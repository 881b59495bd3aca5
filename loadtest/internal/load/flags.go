package load

import (
	"flag"
	"strings"
)

// MultiFlag is a repeatable string flag.
type MultiFlag []string

// String is the values, comma-separated.
func (m *MultiFlag) String() string { return strings.Join(*m, ",") }

// Set adds v.
func (m *MultiFlag) Set(v string) error { *m = append(*m, v); return nil }

// AttackFlags registers the load generator's flags.
func AttackFlags(fs *flag.FlagSet, o *AttackOptions) {
	fs.IntVar(&o.Workers, "workers", DefaultAttack.Workers, "connections the load generator opens before the first request (as wrk2 opens its own; with --sender workers or --lean=false, a worker each); 0: the requests the rate sends in 100 ms (the latency SLO), at least 64")
	fs.IntVar(&o.MaxWorkers, "max-workers", DefaultAttack.MaxWorkers, "most requests in flight")
	fs.IntVar(&o.Connections, "connections", DefaultAttack.Connections, "idle keep-alive connections kept")
	fs.DurationVar(&o.Timeout, "timeout", DefaultAttack.Timeout, "per-request timeout")
	fs.StringVar(&o.Sender, "sender", DefaultAttack.Sender, "the lean client's shape: loop (one epoll event loop owns every connection, as in wrk) or workers (a goroutine per request in flight); loop is workers where the system has no epoll")
	fs.IntVar(&o.Loops, "loops", DefaultAttack.Loops, "event loops of --sender loop, each with its share of the requests and the connections (wrk's -t); one takes at most one CPU (18-43 us of CPU per request on a 2-core VM), and each more costs CPU per request (two: 54-56 us against 36-37 at 5,000/s), so add one only when one loop's CPU is full")
	fs.BoolVar(&o.Lean, "lean", DefaultAttack.Lean, "send through the lean HTTP/1.1 client (about a quarter of Go's transport's CPU per request); -lean=false: Go's")
}
