// Package layout holds the tests that keep the repository's shape: the
// direction of imports inside ledger/, loadtest/ and proxy/, the wire contract
// free of gin, SQL only in the ledger's store, and the size of files and
// functions.
// It has no code of its own; `go test ./internal/layout` runs the checks, and
// `make test` and `make lint` run them with the rest.
package layout
