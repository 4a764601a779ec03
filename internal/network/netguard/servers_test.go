package netguard

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/internal/testkit/testclock"
)

// testLocal is what the fake host routes to itself: the loopback range,
// its interface address 192.0.2.2 and fd00::2, and an AnyIP range.
var testLocal = mustPrefixes("127.0.0.0/8", "192.0.2.2/32", "fd00::2/128", "10.9.0.0/16", "::1/128")

// fakeServers returns Servers on the fake host, whose names resolve
// through names (a missing name fails).
func fakeServersWith(t *testing.T, names map[string][]string, addrs ...string) *Servers {
	t.Helper()
	lookup := func(_ context.Context, _, host string) ([]netip.Addr, error) {
		as, ok := names[host]
		if !ok {
			return nil, errors.New("no such host")
		}
		var out []netip.Addr
		for _, a := range as {
			out = append(out, netip.MustParseAddr(a))
		}
		return out, nil
	}
	local := func() ([]netip.Prefix, error) { return testLocal, nil }
	return newServers(context.Background(), addrs, &Servers{lookupIP: lookup, local: local, now: time.Now})
}

func fakeServers(t *testing.T, addrs ...string) *Servers {
	t.Helper()
	return fakeServersWith(t, nil, addrs...)
}

func TestServersRefuses(t *testing.T) {
	names := map[string][]string{
		"localhost":    {"127.0.0.1", "::1"},
		"redis.remote": {"10.0.0.5", "10.0.0.6"},
		"redis.self":   {"192.0.2.2"},
	}
	type probe struct {
		addr    string
		port    uint16
		refused bool
	}
	tests := []struct {
		name    string
		servers []string
		probes  []probe
	}{
		{"a loopback node", []string{"127.0.0.1:6379"}, []probe{
			{"127.0.0.1", 6379, true}, {"127.0.0.2", 6379, true}, {"127.255.255.254", 6379, true},
			{"::1", 6379, true}, {"::ffff:127.0.0.3", 6379, true}, {"::127.0.0.2", 6379, true},
			{"64:ff9b::7f00:2", 6379, true}, {"2002:7f00:2::", 6379, true},
			{"0.0.0.0", 6379, true}, {"::", 6379, true}, {"0.1.2.3", 6379, true},
			{"192.0.2.2", 6379, true}, {"fd00::2", 6379, true}, {"10.9.1.1", 6379, true},
			// another port, or an address of another host
			{"127.0.0.2", 6380, false}, {"127.0.0.1", 16379, false}, {"10.0.0.7", 6379, false},
			{"192.0.2.3", 6379, false}, {"93.184.216.34", 6379, false}, {"2002:5db8:d822::", 6379, false},
		}},
		{"a remote node", []string{"10.0.0.5:6379"}, []probe{
			{"10.0.0.5", 6379, true}, {"::ffff:10.0.0.5", 6379, true}, {"64:ff9b::a00:5", 6379, true},
			{"127.0.0.1", 6379, false}, {"192.0.2.2", 6379, false}, {"10.0.0.6", 6379, false}, {"10.0.0.5", 6380, false},
		}},
		{"a node at the host's own address", []string{"192.0.2.2:7000"}, []probe{
			{"127.0.0.9", 7000, true}, {"::1", 7000, true}, {"192.0.2.2", 7000, true}, {"127.0.0.9", 7001, false},
		}},
		{"a node at the unspecified address", []string{"0.0.0.0:7000"}, []probe{{"127.0.0.2", 7000, true}, {"192.0.2.2", 7000, true}}},
		{"an IPv6 loopback node", []string{"[::1]:7000"}, []probe{{"127.0.0.2", 7000, true}, {"192.0.2.2", 7000, true}}},
		{"a name resolving to loopback", []string{"LocalHost:6379"}, []probe{
			{"127.0.0.7", 6379, true}, {"192.0.2.2", 6379, true}, {"10.0.0.5", 6379, false},
		}},
		{"a name resolving to the host's address", []string{"redis.self:6379"}, []probe{{"127.0.0.3", 6379, true}}},
		{"a name resolving elsewhere, every address of it", []string{"redis.remote:6379"}, []probe{
			{"10.0.0.5", 6379, true}, {"10.0.0.6", 6379, true}, {"127.0.0.1", 6379, false}, {"10.0.0.7", 6379, false},
		}},
		{"a name that does not resolve: its port everywhere", []string{"redis.gone:6379"}, []probe{
			{"93.184.216.34", 6379, true}, {"127.0.0.1", 6379, true}, {"127.0.0.1", 6380, false},
		}},
		{"several nodes", []string{"10.0.0.5:6379", "127.0.0.1:26379", "redis.remote:7000"}, []probe{
			{"10.0.0.5", 6379, true}, {"127.0.0.1", 6379, false}, {"127.0.0.4", 26379, true},
			{"10.0.0.6", 7000, true}, {"127.0.0.1", 7000, false},
		}},
		{"entries that are not addresses are skipped", []string{"/run/redis.sock", "FailoverClient", "h:port", "h:0"}, []probe{
			{"127.0.0.1", 6379, false}, {"127.0.0.1", 0, false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fakeServersWith(t, names, tt.servers...)
			want, got := map[string]bool{}, map[string]bool{}
			for _, p := range tt.probes {
				k := netip.AddrPortFrom(netip.MustParseAddr(p.addr), p.port).String()
				want[k] = p.refused
				got[k] = s.refuses(context.Background(), netip.MustParseAddr(p.addr).Unmap(), p.port)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("refused (-want +got):\n%s", diff)
			}
		})
	}
}

// Through Guard.Check, whatever the rules open, with the refusal's reason.
func TestServersBeatEveryRule(t *testing.T) {
	g := &Guard{OpenPublic: true, Rules: rules(t, "0.0.0.0/0", "::/0", "localhost", "*.example.com"), Deny: fakeServers(t, "127.0.0.1:6379")}
	for _, h := range []string{"127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.2", "192.0.2.2", "0.0.0.0"} {
		err := g.Check("localhost", netip.MustParseAddr(h), 6379)
		var re *RefusedError
		if !errors.As(err, &re) || re.Why != "the worker's own Redis" {
			t.Errorf("Check(%s:6379) = %v, want refused as the worker's own Redis", h, err)
		}
		if err := g.Check("localhost", netip.MustParseAddr(h), 6380); err != nil {
			t.Errorf("Check(%s:6380) = %v, want allowed (another port)", h, err)
		}
	}
}

// A name is looked up again once ResolveEvery has passed, and what it
// answered before stays refused.
func TestServersResolveAgain(t *testing.T) {
	answers := [][]string{{"10.0.0.5"}, {"10.0.0.8"}}
	calls := 0
	now := testclock.Epoch()
	lookup := func(_ context.Context, _, host string) ([]netip.Addr, error) {
		i := min(calls, len(answers)-1)
		calls++
		var out []netip.Addr
		for _, a := range answers[i] {
			out = append(out, netip.MustParseAddr(a))
		}
		return out, nil
	}
	s := newServers(context.Background(), []string{"redis.moving:6379"}, &Servers{
		lookupIP: lookup, local: func() ([]netip.Prefix, error) { return testLocal, nil }, now: func() time.Time { return now }})
	a5, a8 := netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("10.0.0.8")
	if !s.refuses(context.Background(), a5, 6379) || s.refuses(context.Background(), a8, 6379) {
		t.Fatalf("first answer: 10.0.0.5 refused=%v, 10.0.0.8 refused=%v", s.refuses(context.Background(), a5, 6379), s.refuses(context.Background(), a8, 6379))
	}
	if calls != 1 {
		t.Errorf("%d lookups before ResolveEvery, want 1", calls)
	}
	now = now.Add(ResolveEvery)
	if !s.refuses(context.Background(), a8, 6379) || !s.refuses(context.Background(), a5, 6379) {
		t.Errorf("after ResolveEvery: both addresses must be refused")
	}
	if calls != 2 {
		t.Errorf("%d lookups, want 2", calls)
	}
	// Another port never looks up.
	now = now.Add(ResolveEvery)
	s.refuses(context.Background(), a8, 6380)
	if calls != 2 {
		t.Errorf("a check of another port looked the name up")
	}
}

// A name answering with ever new addresses ends up refused everywhere on
// its port.
func TestServersTooManyAddresses(t *testing.T) {
	n := 0
	now := testclock.Epoch()
	lookup := func(context.Context, string, string) ([]netip.Addr, error) {
		var out []netip.Addr
		for range 100 {
			n++
			out = append(out, netip.AddrFrom4([4]byte{10, 1, byte(n >> 8), byte(n)}))
		}
		return out, nil
	}
	s := newServers(context.Background(), []string{"redis.many:6379"}, &Servers{
		lookupIP: lookup, local: func() ([]netip.Prefix, error) { return testLocal, nil }, now: func() time.Time { return now }})
	for range 3 {
		now = now.Add(ResolveEvery)
		s.refuses(context.Background(), netip.MustParseAddr("10.1.0.1"), 6379)
	}
	if !s.refuses(context.Background(), netip.MustParseAddr("93.184.216.34"), 6379) {
		t.Error("past maxServerAddrs addresses, the port is not refused everywhere")
	}
}

// When what is local cannot be read, a local server's port is refused.
func TestServersLocalUnreadable(t *testing.T) {
	s := newServers(context.Background(), []string{"127.0.0.1:6379"}, &Servers{
		local: func() ([]netip.Prefix, error) { return nil, errors.New("netlink refused") }, now: time.Now})
	if !s.refuses(context.Background(), netip.MustParseAddr("93.184.216.34"), 6379) {
		t.Error("an unreadable routing table let the port through")
	}
	if s.refuses(context.Background(), netip.MustParseAddr("93.184.216.34"), 6380) {
		t.Error("another port refused")
	}
}

// The real host: its loopback range and interface addresses are local.
func TestLocalPrefixes(t *testing.T) {
	ps, err := localPrefixes()
	if err != nil {
		t.Fatal(err)
	}
	ifs, err := interfacePrefixes()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"127.0.0.1", "127.0.0.2", "::1"} {
		if !isLocal(netip.MustParseAddr(a), ps) {
			t.Errorf("%s is not local", a)
		}
	}
	for _, p := range ifs {
		if !isLocal(p.Addr(), ps) {
			t.Errorf("interface address %s is not local", p.Addr())
		}
	}
	if isLocal(netip.MustParseAddr("93.184.216.34"), ps) && !slices.ContainsFunc(ifs, func(p netip.Prefix) bool { return p.Addr() == netip.MustParseAddr("93.184.216.34") }) {
		t.Error("a public address is local")
	}
}

func TestServersAddrs(t *testing.T) {
	s := fakeServersWith(t, map[string][]string{"localhost": {"127.0.0.1", "::1"}}, "localhost:6379", "[::ffff:10.0.0.5]:7000")
	got := s.Addrs()
	want := []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:6379"), netip.MustParseAddrPort("[::1]:6379"), netip.MustParseAddrPort("10.0.0.5:7000")}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
		t.Errorf("Addrs (-want +got):\n%s", diff)
	}
	var nilS *Servers
	if nilS.Addrs() != nil || nilS.refuses(context.Background(), netip.MustParseAddr("127.0.0.1"), 6379) {
		t.Error("a nil Servers refuses something")
	}
}

// The hot path: a port no server listens on.
func BenchmarkServersOtherPort(b *testing.B) {
	s := NewServers(context.Background(), []string{"127.0.0.1:6379", "10.0.0.5:6380", "10.0.0.6:26379"}, nil)
	a := netip.MustParseAddr("127.0.0.2")
	for b.Loop() {
		if s.refuses(context.Background(), a, 443) {
			b.Fatal("refused")
		}
	}
}

// A port match on a local server reads the routing tables.
func BenchmarkServersLocalPort(b *testing.B) {
	s := NewServers(context.Background(), []string{"127.0.0.1:6379"}, nil)
	a := netip.MustParseAddr("93.184.216.34")
	for b.Loop() {
		if s.refuses(context.Background(), a, 6379) {
			b.Fatal("refused")
		}
	}
}
