package httpx

import (
	"context"
	"crypto/subtle"
	"maps"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/voucher"
)

// The actors a request or a job is known by when no named token says who.
const (
	DefaultActor   = "default"   // the single token of LEDGER_TOKEN / PROXY_TOKEN
	AnonymousActor = "anonymous" // auth is off: nobody showed a token
)

const actorKey = "flashgate.actor"

// tokens returns the service's tokens by name: Tokens, and Token as DefaultActor.
func (s Service) tokens() map[string]string {
	all := maps.Clone(s.Tokens)
	if s.Token != "" {
		if all == nil {
			all = map[string]string{}
		}
		all[DefaultActor] = s.Token
	}
	return all
}

// Auth requires "Authorization: Bearer <token>" with one of tokens (name ->
// token) on every route but the open ones, and keeps the token's name on the
// context as the request's actor (ActorFrom): admin changes are audited under
// it. No tokens turns auth off; the actor is then AnonymousActor.
func Auth(tokens map[string]string, open ...string) gin.HandlerFunc {
	type named struct {
		name string
		want []byte
	}
	var known []named
	for name, token := range tokens {
		known = append(known, named{name: name, want: []byte("Bearer " + token)})
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
		got := []byte(c.GetHeader(api.HeaderAuthorization))
		actor := ""
		for _, k := range known { // every token compared: the time taken does not tell which matched
			if subtle.ConstantTimeCompare(got, k.want) == 1 {
				actor = k.name
			}
		}
		if actor == "" {
			c.Header("WWW-Authenticate", "Bearer") // RFC 6750: the scheme the 401 asks for
			WriteError(c, voucher.Errorf(voucher.CodeUnauthorized, "a valid bearer token is required"))
			return
		}
		c.Set(actorKey, actor)
	}
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
// the proxy's per-client limits key on it (proxy/clientkey.go).
func ClientName(c *gin.Context) string {
	switch actor := ActorFrom(c); actor {
	case DefaultActor, AnonymousActor:
		return ""
	default:
		return actor
	}
}
