package httpx

import (
	"net/http"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/gin-gonic/gin"
)

// ServeOpenAPI registers GET /openapi.yaml, the API description (api.OpenAPI).
// It is one of the api.OpenPaths: reading it needs no token.
func ServeOpenAPI(r gin.IRoutes) {
	spec := api.OpenAPI()
	r.GET(api.OpenAPIPath, func(c *gin.Context) {
		c.Data(http.StatusOK, "application/yaml", spec)
	})
}
