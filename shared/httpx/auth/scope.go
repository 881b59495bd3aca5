package auth

import (
	"fmt"
	"slices"

	"github.com/flashgate/flashgate/shared/envconf"
)

// Scope is one power a bearer token holds (LEDGER_TOKENS, PROXY_TOKENS:
// name:token[:scope+scope...]). A token written without a scope list holds
// them all.
type Scope string

// The scopes. Each route needs one of a set (RouteScopes).
const (
	ScopeReserve  Scope = "reserve"  // reserve, read a reservation
	ScopeSettle   Scope = "settle"   // confirm, release, refund
	ScopeRead     Scope = "read"     // admin lists, views, export, audit, the events feed
	ScopeWrite    Scope = "write"    // admin changes: create, PATCH, pause/resume, warmup, reconcile, event retry
	ScopeInternal Scope = "internal" // what a proxy needs from a ledger, nothing else
)

// Scopes are every scope, in the order --help lists them: what
// envconf.Reader.Tokens accepts in a scope list.
var Scopes = []string{string(ScopeReserve), string(ScopeSettle), string(ScopeRead), string(ScopeWrite), string(ScopeInternal)}

// RouteScopes says which scopes may call each route, keyed by method and
// pattern as gin registers them ("GET /admin/vouchers/:code"): a token with
// any one of them may. A registered route missing from the map is refused to
// every token (403): a new route is closed until it is given its scopes.
type RouteScopes map[string][]Scope

// RouteKey is a route's key in RouteScopes: "METHOD pattern".
func RouteKey(method, pattern string) string { return method + " " + pattern }

// allows reports whether a token holding held (nil: every scope) may call the
// route; want is what the route takes.
func allows(held []Scope, want []Scope) bool {
	if held == nil {
		return len(want) > 0
	}
	for _, w := range want {
		if slices.Contains(held, w) {
			return true
		}
	}
	return false
}

// CheckTokens refuses named tokens (tokensVar) that would make an actor
// ambiguous beside the single one (tokenVar, named DefaultActor): a second
// "default", or the single token under another name.
func CheckTokens(tokenVar, token, tokensVar string, tokens map[string]envconf.Credential) error {
	if _, dup := tokens[DefaultActor]; dup && token != "" {
		return fmt.Errorf("%s must not name a token %s while %s (named %s) is set", tokensVar, DefaultActor, tokenVar, DefaultActor)
	}
	for name, c := range tokens {
		if c.Token == token {
			return fmt.Errorf("%s: %s has the same token as %s", tokensVar, name, tokenVar)
		}
	}
	return nil
}
