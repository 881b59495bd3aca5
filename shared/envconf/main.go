package envconf

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/flashgate/flashgate/shared/buildinfo"
)

// LogLevels are LOG_LEVEL's values, the default first.
var LogLevels = []string{"info", "debug", "warn", "error"}

// Main is a service's main: --help prints every setting config reads (with its
// default and meaning) and --version the build, both exiting 0; otherwise
// JSON logs on stderr at LOG_LEVEL, the garbage collector at GOGC, the
// configuration read once (exit 2 when it is bad), then run until it returns
// (exit 1 on an error). The logger is handed to run, never made the process
// default: whatever logs gets it passed down.
func Main[C any](name, doc string, config func(*Reader) (C, error), run func(C, *slog.Logger) error) {
	if code, done := Command(os.Stdout, os.Stderr, os.Args[1:], name, doc, config); done {
		os.Exit(code)
	}
	r := New()
	level, gc := Shared(r)
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	debug.SetGCPercent(gc)
	cfg, err := config(r)
	if err == nil {
		err = r.Err()
	}
	if err != nil {
		log.Error("bad configuration", "err", err)
		os.Exit(2)
	}
	log.Info("starting", "service", name, "version", buildinfo.Version(), "revision", buildinfo.Revision())
	if err := run(cfg, log); err != nil {
		if errors.Is(err, ErrBadSetting) {
			// The line says it already: the message ends with the cause.
			log.Error("bad configuration", "err", strings.TrimSuffix(err.Error(), ": "+ErrBadSetting.Error()))
			os.Exit(2)
		}
		log.Error(name+" stopped", "err", err)
		os.Exit(1)
	}
}

// Shared reads the settings Main reads for every service: LOG_LEVEL, GOGC and
// GOMEMLIMIT.
func Shared(r *Reader) (slog.Level, int) {
	level, gc := LogLevel(r), GCPercent(r)
	// The Go runtime reads and applies GOMEMLIMIT itself (and refuses to
	// start with a malformed one); it is declared here for --help.
	r.String("GOMEMLIMIT", "", "a soft limit on the Go heap such as 200MiB, at which garbage collection runs whatever GOGC says (Go's own variable); set it below a container's memory limit")
	return level, gc
}

// DefaultGCPercent is GOGC when it is unset, in place of Go's 100. A service's
// live heap is a few MB, so at 100 a burst collects every few hundred
// milliseconds and the collector takes about 7% of the proxy's CPU; at 400
// the heap may grow to five times the live one (tens of MB) and the proxy
// answers 4-8% more requests a second (loadtest/BENCHMARKS.md, third pass).
const DefaultGCPercent = 400

// GCPercent reads GOGC, the Go runtime's own variable, as the runtime reads
// it: a percent of the live heap the next collection waits for, or off (-1).
// Main applies it, so that unset it is DefaultGCPercent.
func GCPercent(r *Reader) int {
	v := r.String("GOGC", strconv.Itoa(DefaultGCPercent),
		"garbage collection starts when the heap has grown by this percent of the live heap (Go's GOGC; off: never)")
	if strings.EqualFold(v, "off") {
		return -1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		r.fail("GOGC", "a percent (0 or more) or off", v)
		return DefaultGCPercent
	}
	return n
}

// LogLevel reads LOG_LEVEL, the setting Main reads for every service, one of LogLevels.
func LogLevel(r *Reader) slog.Level {
	var level slog.Level
	// The choices are slog's own names, so this cannot fail.
	_ = level.UnmarshalText([]byte(r.OneOf("LOG_LEVEL", LogLevels, "the least severe log lines written")))
	return level
}

// Command answers the command line of a service that takes none but --help
// and --version: it returns done with the exit code when args asked for one of
// them (or were not understood), and done false when the service should run.
func Command[C any](stdout, stderr io.Writer, args []string, name, doc string, config func(*Reader) (C, error)) (code int, done bool) {
	if len(args) == 0 {
		return 0, false
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		Usage(stdout, name, doc, config)
		return 0, true
	case "-version", "--version", "version":
		fmt.Fprintf(stdout, "%s %s (revision %s)\n", name, buildinfo.Version(), buildinfo.Revision())
		return 0, true
	}
	fmt.Fprintf(stderr, "%s: unknown argument %q: it is configured by environment variables (see %s --help)\n", name, args[0], name)
	return 2, true
}

// Usage writes the help of a service: doc, then every setting config reads,
// found by running config over an empty environment (its error, a required
// setting missing, is what help is for, so it is ignored).
func Usage[C any](w io.Writer, name, doc string, config func(*Reader) (C, error)) {
	r := NewFrom(nil)
	Shared(r)
	_, _ = config(r)
	fmt.Fprintf(w, "Usage: %s [--help | --version]\n\n%s\n\nEnvironment (empty means unset):\n", name, strings.TrimSpace(doc))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, s := range r.Settings() {
		def := s.Default
		if def == "" {
			def = "(unset)"
		}
		line := s.Help
		if s.Accepts != "" {
			line += " (" + s.Accepts + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", s.Name, def, line)
	}
	_ = tw.Flush()
}
