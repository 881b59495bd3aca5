package limits

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/shared/httpx/auth"
)

// headerForwardedFor lists the addresses a request passed through, the
// client's first, each proxy appending the address it was called from.
const headerForwardedFor = "X-Forwarded-For"

// clientKeys names the client of a request, for the per-client limits
// (CLIENT_RATE) and the memory of early retries: the name of the named token
// it showed (auth.ClientName), else its address. The address is the peer's,
// unless the peer is one of the trusted proxies (TRUSTED_PROXIES): then it is
// read from X-Forwarded-For, from the right, skipping the trusted proxies'
// own addresses, and the first address outside them is the client (the
// left-most of the list when every address in it is trusted). Only an address
// a trusted proxy appended is believed: whatever a client writes into the
// header itself stands to the left of it.
//
// An address is normalised before it becomes a key: a port written after it
// (an X-Forwarded-For entry as ip:port) is dropped, an IPv4-mapped IPv6
// address is its IPv4, and an IPv6 address is its network of v6Bits
// (CLIENT_KEY_IPV6_PREFIX, /64 by default): one host is given a whole /64,
// and keyed by the address alone a bot would hold as many buckets as it
// picks addresses.
type clientKeys struct {
	trusted []netip.Prefix
	v6Bits  int // 1-128; 0: 128 (every address its own key)
}

// ParseTrustedProxies reads TRUSTED_PROXIES: CIDRs (or single addresses)
// separated by commas; empty: no proxy is trusted.
func ParseTrustedProxies(s string) ([]netip.Prefix, error) {
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
// an address (normalised: a /64 for IPv6).
func (k clientKeys) key(c *gin.Context) string {
	if name := auth.ClientName(c); name != "" {
		return "token:" + name
	}
	peer, ok := parseHop(peerAddr(c.Request.RemoteAddr))
	if !ok {
		return c.Request.RemoteAddr
	}
	if !k.isTrusted(peer) {
		return k.normal(peer)
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
			a, ok := parseHop(hop)
			if !ok {
				return hop // not an address: a key of its own, as the client wrote it
			}
			if !k.isTrusted(a) {
				return k.normal(a)
			}
			client = a
		}
	}
	return k.normal(client)
}

// parseHop reads an address as a proxy or a client wrote it: bare, with a
// port (ip:port, [ipv6]:port), IPv4-mapped, with a zone; the address alone.
func parseHop(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		ap, perr := netip.ParseAddrPort(s)
		if perr != nil {
			return netip.Addr{}, false
		}
		a = ap.Addr()
	}
	return a.Unmap().WithZone(""), true
}

// normal is a's client key: the address, or for IPv6 its network of v6Bits.
func (k clientKeys) normal(a netip.Addr) string {
	if a.Is6() && k.v6Bits > 0 && k.v6Bits < 128 {
		p, err := a.Prefix(k.v6Bits)
		if err == nil {
			return p.String()
		}
	}
	return a.String()
}

// isTrusted reports whether a is one of the trusted proxies.
func (k clientKeys) isTrusted(a netip.Addr) bool {
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
