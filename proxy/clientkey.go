package main

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/shared/httpx"
)

// headerForwardedFor lists the addresses a request passed through, the
// client's first, each proxy appending the address it was called from.
const headerForwardedFor = "X-Forwarded-For"

// clientKeys names the client of a request, for the per-client limits
// (CLIENT_RATE) and the memory of early retries: the name of the named token
// it showed (httpx.ClientName), else its address. The address is the peer's,
// unless the peer is one of the trusted proxies (TRUSTED_PROXIES): then it is
// read from X-Forwarded-For, from the right, skipping the trusted proxies'
// own addresses, and the first address outside them is the client (the
// left-most of the list when every address in it is trusted). Only an address
// a trusted proxy appended is believed: whatever a client writes into the
// header itself stands to the left of it.
type clientKeys struct {
	trusted []netip.Prefix
}

// parseTrustedProxies reads TRUSTED_PROXIES: CIDRs (or single addresses)
// separated by commas; empty: no proxy is trusted.
func parseTrustedProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, fmt.Errorf("TRUSTED_PROXIES: %q is neither a CIDR nor an address", f)
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("TRUSTED_PROXIES: %q is not a CIDR: %w", f, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// key returns the client key of c's request: "token:" and a token's name, or
// an address.
func (k clientKeys) key(c *gin.Context) string {
	if name := httpx.ClientName(c); name != "" {
		return "token:" + name
	}
	peer := peerAddr(c.Request.RemoteAddr)
	if !k.isTrusted(peer) {
		return peer
	}
	hops := c.Request.Header.Values(headerForwardedFor)
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		list := strings.Split(hops[i], ",")
		for j := len(list) - 1; j >= 0; j-- {
			hop := strings.TrimSpace(list[j])
			if hop == "" {
				continue
			}
			if !k.isTrusted(hop) {
				return hop
			}
			client = hop
		}
	}
	return client
}

// isTrusted reports whether addr is one of the trusted proxies.
func (k clientKeys) isTrusted(addr string) bool {
	if len(k.trusted) == 0 {
		return false
	}
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, p := range k.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// peerAddr is the address of a request's RemoteAddr, without its port.
func peerAddr(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return remote
	}
	return host
}
