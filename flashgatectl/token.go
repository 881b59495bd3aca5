package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// maxTokenBytes bounds what --token-file and --token-stdin read: a token is
// a line, not a file's worth.
const maxTokenBytes = 4 << 10

// settleToken fills a.token from the one source the command line names:
// --token, --token-file or --token-stdin, else $FLASHGATE_TOKEN. A file or
// stdin keeps the token out of ps and the shell's history; their trailing
// newline is dropped. Then it warns, on stderr, when the token would cross
// the network in the clear.
func (a *app) settleToken(cmd *cobra.Command) error {
	given := 0
	for _, f := range []string{"token", "token-file", "token-stdin"} {
		if cmd.Flags().Changed(f) {
			given++
		}
	}
	if given > 1 {
		return usagef("give one of --token, --token-file and --token-stdin")
	}
	switch {
	case cmd.Flags().Changed("token-file"):
		f, err := os.Open(a.tokenFile)
		if err != nil {
			return usagef("--token-file: %v", err)
		}
		defer f.Close()
		if a.token, err = readToken(f); err != nil {
			return usagef("--token-file %s: %v", a.tokenFile, err)
		}
	case a.tokenStdin:
		var err error
		if a.token, err = readToken(a.stdin); err != nil {
			return usagef("--token-stdin: %v", err)
		}
		// stdin is spent: no one can answer a confirmation on it.
		a.interactive = func() bool { return false }
	case !cmd.Flags().Changed("token"):
		a.token = a.getenv(envToken)
	}
	if a.token != "" && cleartextTo(a.ledger) {
		fmt.Fprintf(a.stderr, "flashgatectl: warning: the token goes to %s over plain http://, readable by anyone on the way; use https://\n",
			a.ledger)
	}
	return nil
}

// readToken reads a token: the first line of r, without its line ending or
// surrounding blanks; an empty one is an error.
func readToken(r io.Reader) (string, error) {
	line, err := bufio.NewReaderSize(io.LimitReader(r, maxTokenBytes), maxTokenBytes).ReadString('\n')
	if err != nil && err != io.EOF {
		return "", err
	}
	token := strings.TrimSpace(line)
	if token == "" {
		return "", fmt.Errorf("no token (an empty first line)")
	}
	return token, nil
}

// cleartextTo reports whether base is an http:// URL of a host other than
// this machine's loopback: a bearer token sent there can be read on the way.
func cleartextTo(base string) bool {
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "http" {
		return false
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}
