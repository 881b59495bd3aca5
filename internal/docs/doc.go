// Package docs holds the tests that keep the documentation true to the code:
// every setting the services read has a row in docs/configuration.md with its
// default, every route of the OpenAPI description is in docs/api.md (and no
// other), every package is in CONTRIBUTING.md's layout, the Go client example
// builds from another module, the operator's curl snippets answer what they
// show against a real stack, the links between the docs resolve, and no page
// carries issue numbers, dated runs or long lines.
// It has no code of its own; `go test ./internal/docs` runs the checks.
package docs
