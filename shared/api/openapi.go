package api

import _ "embed"

// openAPI is the OpenAPI 3.1 description of both services' routes and of the
// bodies this package declares. One file serves both services: each
// operation's x-served-by names the services that register it.
//
//go:embed openapi.yaml
var openAPI []byte

// OpenAPI returns the API description both services serve on OpenAPIPath (a
// copy).
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }
