package envconf

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/flashgate/flashgate/shared/buildinfo"
)

// LogLevels are LOG_LEVEL's values, the default first.
var LogLevels = []string{"info", "debug", "warn", "error"}

// Main is a service's main: --help prints every setting config reads (with its
// default and meaning) and --version the build, both exiting 0; otherwise
// JSON logs on stderr at LOG_LEVEL, the configuration read once (exit 2 when
// it is bad), then run until it returns (exit 1 on an error). The logger is
// handed to run, never made the process default: whatever logs gets it passed
// down.
func Main[C any](name, doc string, config func(*Reader) (C, error), run func(C, *slog.Logger) error) {
	if code, done := Command(os.Stdout, os.Stderr, os.Args[1:], name, doc, config); done {
		os.Exit(code)
	}
	r := New()
	level := LogLevel(r)
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
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
			log.Error("bad configuration", "err", err)
			os.Exit(2)
		}
		log.Error(name+" stopped", "err", err)
		os.Exit(1)
	}
}

// LogLevel reads LOG_LEVEL, the setting Main reads for every service,, one of LogLevels.
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
	LogLevel(r)
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
