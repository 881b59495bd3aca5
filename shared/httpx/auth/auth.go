package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/envconf"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/voucher"
)

// The actors a request or a job is known by when no named token says who.
const (
	DefaultActor   = "default"   // the single token of LEDGER_TOKEN / PROXY_TOKEN
	AnonymousActor = "anonymous" // auth is off: nobody showed a token
)

const actorKey = "flashgate.actor"

// Auth requires "Authorization: Bearer <token>" with one of tokens (name ->
// token and scopes) on every route but the open ones, and keeps the token's
// name on the context as the request's actor (ActorFrom): admin changes are
// audited under it. A missing or unknown token is 401 UNAUTHORIZED; a known
// one without any of the scopes routes gives the matched route (none for a
// route missing from routes) is 403 FORBIDDEN. A path that matches no route
// goes on to the 404/405 once its token is known. No tokens turns auth off;
// the actor is then AnonymousActor.
func Auth(tokens map[string]envconf.Credential, routes RouteScopes, open ...string) gin.HandlerFunc {
	type named struct {
		name   string
		want   [sha256.Size]byte // of "Bearer <token>": equal lengths, so the compare's time tells nothing
		scopes []Scope           // nil: every scope
	}
	var known []named
	for name, t := range tokens {
		k := named{name: name, want: sha256.Sum256([]byte("Bearer " + t.Token))}
		for _, sc := range t.Scopes {
			k.scopes = append(k.scopes, Scope(sc))
		}
		known = append(known, k)
	}
	return func(c *gin.Context) {
		if len(known) == 0 {
			c.Set(actorKey, AnonymousActor)
			return
		}
		for _, p := range open {
			if c.Request.URL.Path == p {
				return
			}
		}
		got := sha256.Sum256([]byte(c.GetHeader(api.HeaderAuthorization)))
		match := -1
		for i, k := range known { // every token compared: the time taken does not tell which matched
			if subtle.ConstantTimeCompare(got[:], k.want[:]) == 1 {
				match = i
			}
		}
		if match < 0 {
			c.Header("WWW-Authenticate", "Bearer") // RFC 6750: the scheme the 401 asks for
			httpx.WriteError(c, voucher.Errorf(voucher.CodeUnauthorized, "a valid bearer token is required"))
			return
		}
		k := known[match]
		if route := c.FullPath(); route != "" {
			want := routes[RouteKey(c.Request.Method, route)]
			if !allows(k.scopes, want) {
				httpx.WriteError(c, voucher.Errorf(voucher.CodeForbidden, "this token lacks the scope this route needs (%s)", scopeList(want)))
				return
			}
		}
		c.Set(actorKey, k.name)
	}
}

// scopeList writes the scopes a route takes for a 403's message.
func scopeList(want []Scope) string {
	if len(want) == 0 {
		return "none is given to this route"
	}
	s := make([]string, len(want))
	for i, w := range want {
		s[i] = string(w)
	}
	return "one of " + strings.Join(s, ", ")
}

// ActorFrom returns the name of the token the request showed (AnonymousActor
// when auth is off), or "" outside a request that passed Auth.
func ActorFrom(ctx context.Context) string {
	actor, _ := ctx.Value(actorKey).(string)
	return actor
}

// ClientName returns the name of the named token the request showed (one of
// the service's Tokens: PROXY_TOKENS, LEDGER_TOKENS), or "" when it showed
// none, or the single shared token (DefaultActor: every client holds it), or
// auth is off. Where it is set, it names the client better than its address:
// the proxy's per-client limits key on it (proxy/internal/limits/clientkey.go).
func ClientName(c *gin.Context) string {
	switch actor := ActorFrom(c); actor {
	case DefaultActor, AnonymousActor:
		return ""
	default:
		return actor
	}
}
