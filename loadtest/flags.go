package main

import (
	"flag"
	"strings"
)

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string { return strings.Join(*m, ",") }

func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// attackFlags registers the load generator's flags.
func attackFlags(fs *flag.FlagSet, o *AttackOptions) {
	fs.IntVar(&o.Workers, "workers", DefaultAttack.Workers, "load generator workers started up front")
	fs.IntVar(&o.MaxWorkers, "max-workers", DefaultAttack.MaxWorkers, "most requests in flight")
	fs.IntVar(&o.Connections, "connections", DefaultAttack.Connections, "idle keep-alive connections kept")
	fs.DurationVar(&o.Timeout, "timeout", DefaultAttack.Timeout, "per-request timeout")
}
