package main

import (
	"bufio"
	"context"
	"fmt"
	"strings"
)

// confirm asks the operator to type yes before a change that alters a running
// sale, unless yes (--yes) was given. Without a terminal nobody can answer, so
// the change is refused (exit 2) rather than done or hung on stdin. Ctrl-C at
// the question aborts it (the signal only cancels ctx: the read is left behind).
func (a *app) confirm(ctx context.Context, yes bool, what string) error {
	if yes {
		return nil
	}
	if !a.interactive() {
		return &confirmError{what}
	}
	fmt.Fprintf(a.stderr, "%s\nType yes to go on: ", what)
	answer := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(a.stdin).ReadString('\n')
		answer <- strings.TrimSpace(line)
	}()
	select {
	case <-ctx.Done():
		fmt.Fprintln(a.stderr)
		return errAborted
	case line := <-answer:
		if line != "yes" {
			return errAborted
		}
		return nil
	}
}
