// Package netguard decides which network destinations the worker may dial
// on a run's behalf (its downloads of inputs, its egress proxy), and dials
// them: the check is made on the address actually dialed, after the name
// was resolved once, so a name that resolves elsewhere the second time (DNS
// rebinding) changes nothing.
//
// Refused by default, whatever the spelling of the URL: loopback, private
// (RFC 1918), link-local (169.254.0.0/16, the cloud metadata address
// included), CGNAT (100.64.0.0/10), multicast, unspecified, broadcast,
// reserved and documentation ranges, IPv6 loopback, ULA, link-local and
// multicast, every IPv6 spelling of a refused IPv4 address (mapped
// ::ffff:a.b.c.d, compatible ::a.b.c.d, translated ::ffff:0:a.b.c.d, 6to4,
// Teredo), and NAT64 (64:ff9b::/96, 64:ff9b:1::/48) whatever it holds.
// Numeric host spellings other than canonical dotted quads and bracketed
// IPv6 (2130706433, 0x7f.1, 127.1) are refused outright: resolvers
// disagree on what they mean.
//
// An operator's rule opens exactly what it names: an IP or CIDR opens those
// addresses, refused ranges included; a host name opens that host at
// whatever address it resolves to; "*.example.com" opens its subdomains at
// public addresses only. Without OpenPublic (the egress proxy), a name is
// resolved only when a host or *.domain rule names it: an IP or CIDR rule
// opens addresses spelled as such, and no name a step makes up ever
// reaches a resolver (it would carry data out in the query).
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// refused are the ranges a run may not reach unless an IP or CIDR rule
// names them.
var refused = mustPrefixes(
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
	"172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16",
	"198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
	"::/128", "::1/128", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64", "2001:db8::/32",
	"fc00::/7", "fe80::/10", "ff00::/8",
)

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// Rule is one entry of an allow-list.
type Rule struct {
	host     string // exact host name, lower case
	wildcard string // ".example.com" for *.example.com
	prefix   netip.Prefix
}

func (r Rule) String() string {
	switch {
	case r.host != "":
		return r.host
	case r.wildcard != "":
		return "*" + r.wildcard
	}
	return r.prefix.String()
}

// ParseRule parses an allow-list entry: an IP ("127.0.0.1", "::1"), a CIDR
// ("10.0.0.0/8"), a host name ("partner.example") or "*.domain".
func ParseRule(s string) (Rule, error) {
	s = strings.TrimSpace(s)
	if p, err := netip.ParsePrefix(s); err == nil {
		return Rule{prefix: p.Masked()}, nil
	}
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return Rule{prefix: netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())}, nil
	}
	h := strings.ToLower(s)
	if rest, ok := strings.CutPrefix(h, "*."); ok {
		if !validHost(rest) {
			return Rule{}, fmt.Errorf("%q: want an IP, a CIDR, a host name or *.domain", s)
		}
		return Rule{wildcard: "." + rest}, nil
	}
	if !validHost(h) || numericHost(h) {
		return Rule{}, fmt.Errorf("%q: want an IP, a CIDR, a host name or *.domain", s)
	}
	return Rule{host: h}, nil
}

func validHost(h string) bool {
	if h == "" || len(h) > 253 || strings.HasPrefix(h, ".") || strings.HasSuffix(h, ".") {
		return false
	}
	for _, c := range h {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// numericHost reports whether h looks like a numeric IPv4 spelling (digits,
// hex, dots): only canonical dotted quads are taken as addresses.
func numericHost(h string) bool {
	if h == "" {
		return false
	}
	for _, part := range strings.Split(h, ".") {
		p := strings.TrimPrefix(strings.TrimPrefix(part, "0x"), "0X")
		if p == "" {
			return false
		}
		if _, err := strconv.ParseUint(p, 16, 64); err != nil {
			return false
		}
	}
	// a name made of hex-looking labels only ("cafe.beef") is ambiguous
	// enough to refuse too
	return true
}

// Guard decides which destinations may be dialed.
type Guard struct {
	// Rules open destinations (see the package doc).
	Rules []Rule
	// OpenPublic lets every public address through (input downloads);
	// without it only Rules do (the egress proxy).
	OpenPublic bool
	// Deny are refused whatever the rules say, at every address that
	// reaches them: the worker's own Redis (see Servers).
	Deny *Servers
	// Resolver resolves names; default a pure-Go resolver.
	Resolver *net.Resolver
	// Timeout bounds a connection; default 10s.
	Timeout time.Duration
	// Flag is the worker flag whose entries are Rules ("-fetch-allow",
	// "-egress-allow"): a refusal that a rule could lift names it, with
	// the entry that would ("open it with -fetch-allow 127.0.0.1").
	Flag string
}

// openWith says which rule would let host at addr through: an address (a
// refused range is opened only by an IP, a CIDR or the host's own name),
// or the host's name.
func (g *Guard) openWith(host string, addr netip.Addr) string {
	if g.Flag == "" {
		if addr.IsValid() {
			return "open it with an IP or CIDR rule"
		}
		return "open it with a host rule"
	}
	switch {
	case !addr.IsValid():
		return fmt.Sprintf("open it on the worker with %s %s", g.Flag, host)
	case host == "" || host == addr.String():
		return fmt.Sprintf("open it on the worker with %s %s", g.Flag, addr)
	}
	return fmt.Sprintf("open it on the worker with %s %s, or %s %s for the name wherever it resolves", g.Flag, addr, g.Flag, host)
}

// ErrRefused is matched by the error of a destination the guard refuses.
var ErrRefused = errors.New("destination refused")

// RefusedError says why a destination was refused.
type RefusedError struct {
	Host string
	Addr netip.Addr // zero when the host itself was refused
	Why  string
}

func (e *RefusedError) Error() string {
	if e.Addr.IsValid() {
		return fmt.Sprintf("%s (%s) refused: %s", e.Host, e.Addr, e.Why)
	}
	return fmt.Sprintf("%s refused: %s", e.Host, e.Why)
}

// Is reports whether target is ErrRefused.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// Check reports whether host (as the URL or CONNECT names it) may be
// reached at addr:port.
func (g *Guard) Check(host string, addr netip.Addr, port uint16) error {
	return g.check(context.Background(), host, addr, port)
}

func (g *Guard) check(ctx context.Context, host string, addr netip.Addr, port uint16) error {
	// A zone says which interface, not which address: fe80::1%eth0 is
	// classified as fe80::1 (netip's prefixes contain no zoned address).
	addr = addr.Unmap().WithZone("")
	host = strings.ToLower(strings.Trim(host, "[]"))
	if g.Deny.refuses(ctx, addr, port) {
		return &RefusedError{Host: host, Addr: addr, Why: redisWhy}
	}
	inRefused := isRefused(addr)
	for _, r := range g.Rules {
		switch {
		case r.prefix.IsValid() && r.prefix.Contains(addr):
			return nil
		case r.host != "" && r.host == host:
			return nil
		case r.wildcard != "" && strings.HasSuffix(host, r.wildcard) && !inRefused:
			return nil
		}
	}
	if inRefused {
		return &RefusedError{Host: host, Addr: addr, Why: "a loopback, private, link-local or reserved address (" + g.openWith(host, addr) + ")"}
	}
	if !g.OpenPublic {
		return &RefusedError{Host: host, Addr: addr, Why: "not in the allow-list (" + g.openWith(host, addr) + ")"}
	}
	return nil
}

func isRefused(a netip.Addr) bool {
	if !a.IsValid() {
		return true
	}
	if a.Is4() && a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return true
	}
	for _, p := range refused {
		if p.Contains(a) {
			return true
		}
	}
	// An IPv6 spelling of a refused IPv4 address (IPv4-compatible,
	// -translated, NAT64, 6to4, Teredo: addrForms) is refused as that
	// address is; the IPv4-mapped one was unmapped by the caller.
	for _, v4 := range addrForms(a)[1:] {
		if isRefused(v4) {
			return true
		}
	}
	return false
}

// DialContext dials address ("host:port") for a run: the host is
// resolved once, each address checked, and the first allowed one dialed
// by address, so that the address checked is the address connected to.
func (g *Guard) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, portS, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portS, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("port %q: %w", portS, err)
	}
	if err := g.mayResolve(host); err != nil {
		return nil, err
	}
	addrs, err := g.resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	var firstErr error
	timeout := g.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	for _, a := range addrs {
		if err := g.check(ctx, host, a, uint16(port)); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		d := net.Dialer{Timeout: timeout, Control: func(_, addr string, _ syscall.RawConn) error {
			// The socket connects where the check said, nowhere else.
			ap, err := netip.ParseAddrPort(addr)
			if err != nil || ap.Addr().Unmap() != a.Unmap() {
				return fmt.Errorf("netguard: dialing %s, checked %s", addr, a)
			}
			return nil
		}}
		c, err := d.DialContext(ctx, network, netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return c, nil
		}
		if firstErr == nil || errors.Is(firstErr, ErrRefused) {
			firstErr = err
		}
	}
	if firstErr == nil {
		firstErr = fmt.Errorf("%s: no address", host)
	}
	return nil, firstErr
}

// mayResolve refuses, without a lookup, a name that no rule could let
// through: without OpenPublic only a host or *.domain rule lets a name
// through, and resolving any other would hand the resolver (and whoever
// serves the name) whatever a step spelled into it.
func (g *Guard) mayResolve(host string) error {
	h := strings.ToLower(strings.Trim(host, "[]"))
	if g.OpenPublic {
		return nil
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return nil
	}
	for _, r := range g.Rules {
		if r.host != "" && r.host == h || r.wildcard != "" && strings.HasSuffix(h, r.wildcard) {
			return nil
		}
	}
	return &RefusedError{Host: h, Why: "not in the allow-list (names are resolved only when a host or *.domain rule names them: " + g.openWith(h, netip.Addr{}) + ")"}
}

// resolve returns the addresses of host: itself when it is a canonical IP;
// an error for other numeric spellings.
func (g *Guard) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	h := strings.Trim(host, "[]")
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return nil, &RefusedError{Host: host, Why: "an address with a zone"}
		}
		return []netip.Addr{a}, nil
	}
	if numericHost(strings.ToLower(h)) {
		return nil, &RefusedError{Host: host, Why: "a numeric host that is not a dotted quad (resolvers read such spellings differently)"}
	}
	r := g.Resolver
	if r == nil {
		r = &net.Resolver{PreferGo: true}
	}
	addrs, err := r.LookupNetIP(ctx, "ip", h)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	return addrs, nil
}
