package main

import (
	"bufio"
	"fmt"
	"strings"
)

// confirm asks the operator to type yes before a change that alters a running
// sale, unless yes (--yes) was given. Without a terminal nobody can answer, so
// the change is refused (exit 2) rather than done or hung on stdin.
func (a *app) confirm(yes bool, what string) error {
	if yes {
		return nil
	}
	if !a.interactive() {
		return &confirmError{what}
	}
	fmt.Fprintf(a.stderr, "%s\nType yes to go on: ", what)
	line, _ := bufio.NewReader(a.stdin).ReadString('\n')
	if strings.TrimSpace(line) != "yes" {
		return errAborted
	}
	return nil
}
