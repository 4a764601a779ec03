package netguard

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Servers are servers no run may reach, whatever a guard's rules say: the
// worker's own Redis nodes. Each is refused on its port at every address
// that reaches it:
//   - every address its host name resolves to: when Servers is made, and
//     again (the answers added to the earlier ones) when a dial to its port
//     is checked ResolveEvery or more after the last lookup;
//   - when the server is local (one of its addresses is a loopback, an
//     unspecified address or an address of this host), every loopback
//     address (127.0.0.0/8, ::1), every unspecified address (0.0.0.0/8, ::)
//     and every address of this host: its interfaces' and its local
//     routes' (Linux's "local" and "anycast" routes, which cover an address
//     range routed to the host itself), read at each check.
//
// Each form of an address is checked: IPv4-mapped (::ffff:a.b.c.d),
// IPv4-compatible (::a.b.c.d), IPv4-translated (::ffff:0:a.b.c.d), NAT64
// (64:ff9b::/96), 6to4 (2002::/16) and Teredo (2001::/32)
// spellings stand for the IPv4 address they hold. A server whose name has
// never resolved, or whose local addresses cannot be read, is refused on
// its port at every address: where it is cannot be told.
//
// The check of an address on any other port is a scan of a few ports.
type Servers struct {
	// ports are the servers' ports, fixed when made: read without a lock.
	ports []uint16
	// lookupIP resolves the servers' names; local returns the prefixes
	// routed to this host (localPrefixes); now is the clock. Tests
	// replace them.
	lookupIP func(ctx context.Context, network, host string) ([]netip.Addr, error)
	local    func() ([]netip.Prefix, error)
	now      func() time.Time

	mu   sync.Mutex
	list []*server
}

// ResolveEvery is how often, at most, a server's name is looked up again
// when a dial to its port is checked.
const ResolveEvery = 30 * time.Second

// maxServerAddrs bounds the addresses kept for one server's name: past it
// (a name answering with ever new addresses) the server's port is refused
// at every address.
const maxServerAddrs = 256

// resolveTimeout bounds one lookup of a server's name.
const resolveTimeout = 2 * time.Second

// redisWhy is the reason given for a refused server.
const redisWhy = "the worker's own Redis"

type server struct {
	name  string // the host name; "" when the server was given by IP
	port  uint16
	addrs []netip.Addr // unmapped, without zone
	// looked is when name was last looked up; resolved whether a lookup
	// ever answered; everywhere that the port is refused at every address.
	looked     time.Time
	resolved   bool
	everywhere bool
}

// NewServers returns the servers at addrs, each "host:port"; the names
// are looked up now with r (nil: net.DefaultResolver). An entry that is
// not host:port with a numeric port (a unix socket's path) is skipped: no
// run dials it.
func NewServers(ctx context.Context, addrs []string, r *net.Resolver) *Servers {
	if r == nil {
		r = net.DefaultResolver // the one the worker's Redis client dials with
	}
	return newServers(ctx, addrs, &Servers{lookupIP: r.LookupNetIP, local: localPrefixes, now: time.Now})
}

// newServers fills s (its functions set) with the servers at addrs.
func newServers(ctx context.Context, addrs []string, s *Servers) *Servers {
	for _, a := range addrs {
		host, portS, err := net.SplitHostPort(a)
		if err != nil {
			continue
		}
		port, err := strconv.ParseUint(portS, 10, 16)
		if err != nil || port == 0 {
			continue
		}
		sv := &server{port: uint16(port)}
		host = strings.Trim(host, "[]")
		if ip, err := netip.ParseAddr(host); err == nil {
			sv.addrs, sv.resolved = []netip.Addr{ip.Unmap().WithZone("")}, true
		} else {
			sv.name = strings.ToLower(host)
			s.lookup(ctx, sv)
		}
		s.list = append(s.list, sv)
		if !slices.Contains(s.ports, sv.port) {
			s.ports = append(s.ports, sv.port)
		}
	}
	return s
}

// lookup resolves sv's name and adds what it answers to sv's addresses.
// The caller holds s.mu, or s is not shared yet.
func (s *Servers) lookup(ctx context.Context, sv *server) {
	sv.looked = s.now()
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	addrs, err := s.lookupIP(ctx, "ip", sv.name)
	if err != nil || len(addrs) == 0 {
		return
	}
	sv.resolved = true
	for _, a := range addrs {
		a = a.Unmap().WithZone("")
		if !slices.Contains(sv.addrs, a) {
			sv.addrs = append(sv.addrs, a)
		}
	}
	if len(sv.addrs) > maxServerAddrs {
		sv.everywhere, sv.addrs = true, nil
	}
}

// Addrs returns the addresses known for the servers (for logs and tests).
func (s *Servers) Addrs() []netip.AddrPort {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []netip.AddrPort
	for _, sv := range s.list {
		for _, a := range sv.addrs {
			out = append(out, netip.AddrPortFrom(a, sv.port))
		}
	}
	return out
}

// refuses reports whether addr:port may reach one of the servers. addr is
// unmapped and without zone.
func (s *Servers) refuses(ctx context.Context, addr netip.Addr, port uint16) bool {
	if s == nil || !slices.Contains(s.ports, port) {
		return false // the hot path: another port
	}
	forms := addrForms(addr)
	s.mu.Lock()
	defer s.mu.Unlock()
	var local []netip.Prefix
	localRead := false
	for _, sv := range s.list {
		if sv.port != port {
			continue
		}
		if sv.name != "" && s.now().Sub(sv.looked) >= ResolveEvery {
			s.lookup(ctx, sv)
		}
		if sv.everywhere || !sv.resolved {
			return true
		}
		for _, f := range forms {
			if slices.Contains(sv.addrs, f) {
				return true
			}
		}
		if !localRead {
			var err error
			if local, err = s.local(); err != nil {
				return true // cannot tell what is local: refuse
			}
			localRead = true
		}
		if !slices.ContainsFunc(sv.addrs, func(a netip.Addr) bool { return isLocal(a, local) }) {
			continue
		}
		for _, f := range forms {
			if isLocal(f, local) {
				return true
			}
		}
	}
	return false
}

// isLocal reports whether a reaches this host: a loopback or unspecified
// address, or one routed to the host (local).
func isLocal(a netip.Addr, local []netip.Prefix) bool {
	if a.IsLoopback() || a.IsUnspecified() || a.Is4() && a.As4()[0] == 0 {
		return true
	}
	for _, p := range local {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

var (
	nat64      = netip.MustParsePrefix("64:ff9b::/96")
	compat4    = netip.MustParsePrefix("::/96")
	translated = netip.MustParsePrefix("::ffff:0:0:0/96")
	sixTo4     = netip.MustParsePrefix("2002::/16")
	teredo     = netip.MustParsePrefix("2001::/32")
)

// addrForms returns a (unmapped) and the IPv4 addresses an IPv6 spelling
// holds, if any: IPv4-compatible (::a.b.c.d), IPv4-translated
// (::ffff:0:a.b.c.d), NAT64 (64:ff9b::a.b.c.d), 6to4 (2002:AABB:CCDD::)
// or Teredo (2001:0:server:…:client, the client's bits inverted).
func addrForms(a netip.Addr) []netip.Addr {
	a = a.Unmap().WithZone("")
	if !a.Is6() {
		return []netip.Addr{a}
	}
	b := a.As16()
	switch {
	case nat64.Contains(a), translated.Contains(a), compat4.Contains(a) && !a.IsUnspecified() && !a.IsLoopback():
		return []netip.Addr{a, netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})}
	case sixTo4.Contains(a):
		return []netip.Addr{a, netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})}
	case teredo.Contains(a):
		return []netip.Addr{a, netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]}),
			netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})}
	}
	return []netip.Addr{a}
}

// interfacePrefixes returns the addresses of this host's interfaces, each
// as a single-address prefix.
func interfacePrefixes() ([]netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
	}
	return out, nil
}
