package httpx

import (
	_ "embed"
	"net/http"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/gin-gonic/gin"
)

// openAPI is the OpenAPI 3.1 description of both services' routes. One file
// serves both: each operation's x-served-by names the services that register it.
//
//go:embed openapi.yaml
var openAPI []byte

// ServeOpenAPI registers GET /openapi.yaml, the API description. It is one of
// the api.OpenPaths: reading it needs no token.
func ServeOpenAPI(r gin.IRoutes) {
	r.GET(api.OpenAPIPath, func(c *gin.Context) {
		c.Data(http.StatusOK, "application/yaml", openAPI)
	})
}

// OpenAPI returns the API description both services serve (a copy).
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }
