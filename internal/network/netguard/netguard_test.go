package netguard

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func mustRule(t *testing.T, s string) Rule {
	t.Helper()
	r, err := ParseRule(s)
	if err != nil {
		t.Fatalf("ParseRule(%q): %v", s, err)
	}
	return r
}

func rules(t *testing.T, ss ...string) []Rule {
	t.Helper()
	var out []Rule
	for _, s := range ss {
		out = append(out, mustRule(t, s))
	}
	return out
}

// noLookup is a resolver that fails the test if it ever sends a query, and
// counts the attempts.
func noLookup(t *testing.T, calls *atomic.Int32, fail bool) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
		calls.Add(1)
		if fail {
			t.Errorf("resolver dialed %s %s: a lookup was made", network, address)
		}
		return nil, errors.New("no DNS in tests")
	}}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func TestParseRule(t *testing.T) {
	valid := map[string]string{
		"127.0.0.1":       "127.0.0.1/32",
		"::1":             "::1/128",
		"[::1]":           "::1/128",
		"::ffff:10.0.0.1": "10.0.0.1/32",
		"10.1.2.3/8":      "10.0.0.0/8",
		"fc00::/7":        "fc00::/7",
		"Partner.Example": "partner.example",
		" localhost ":     "localhost",
		"*.Example.com":   "*.example.com",
	}
	got := map[string]string{}
	for in := range valid {
		r, err := ParseRule(in)
		if err != nil {
			t.Errorf("ParseRule(%q): %v", in, err)
			continue
		}
		got[in] = r.String()
	}
	if diff := cmp.Diff(valid, got); diff != "" {
		t.Errorf("ParseRule(...).String() (-want +got):\n%s", diff)
	}

	for _, in := range []string{"", "   ", "a b", "*.", "*", "0x7f.1", "127.1", "2130706433", "http://x", "x:80", ".example.com", "example.com.", "*.a b", "under_score.example"} {
		if r, err := ParseRule(in); err == nil {
			t.Errorf("ParseRule(%q) = %v, want an error", in, r)
		}
	}
}

// The refused forms, each refused with OpenPublic and no rule.
var refusedHosts = []string{
	"127.0.0.1", "2130706433", "0x7f.1", "127.1", "0177.0.0.1", "::1", "::ffff:127.0.0.1",
	"169.254.169.254", "10.1.2.3", "172.16.0.1", "192.168.1.1", "100.64.0.1", "0.0.0.0",
	"224.0.0.1", "255.255.255.255", "fc00::1", "fe80::1", "64:ff9b::7f00:1", "2002:7f00:1::",
	"::ffff:169.254.169.254", "2002:a00:1::", "198.51.100.7", "240.0.0.1", "ff02::1", "::",
}

func TestDialContextRefusesEveryForm(t *testing.T) {
	var calls atomic.Int32
	g := &Guard{OpenPublic: true, Resolver: noLookup(t, &calls, true)}
	want, got := map[string]bool{}, map[string]bool{}
	for _, h := range refusedHosts {
		// A canceled context: should a form get through, nothing is sent.
		c, err := g.DialContext(canceled(), "tcp", net.JoinHostPort(h, "80"))
		if c != nil {
			c.Close()
		}
		want[h], got[h] = true, errors.Is(err, ErrRefused)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DialContext refused (-want +got):\n%s", diff)
	}
}

func TestCheckRefusedRanges(t *testing.T) {
	g := &Guard{OpenPublic: true}
	want, got := map[string]bool{}, map[string]bool{}
	for _, h := range refusedHosts {
		a, err := netip.ParseAddr(h)
		if err != nil {
			continue // the numeric spellings: see TestDialContextRefusesEveryForm
		}
		err = g.Check(h, a, 443)
		want[h], got[h] = true, errors.Is(err, ErrRefused)
		var re *RefusedError
		if err != nil && (!errors.As(err, &re) || re.Why == "") {
			t.Errorf("Check(%s): %v is not a *RefusedError with a reason", h, err)
		}
	}
	// Public addresses, and 6to4 of a public one, are not refused.
	for _, h := range []string{"93.184.216.34", "1.1.1.1", "2606:4700::1111", "2002:5db8:d822::"} {
		want[h], got[h] = false, errors.Is(g.Check(h, netip.MustParseAddr(h), 443), ErrRefused)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Check refused (-want +got):\n%s", diff)
	}
}

// A link-local address with a zone (as the resolver may return from
// /etc/hosts) is as refused as one without.
func TestCheckRefusesZonedAddress(t *testing.T) {
	g := &Guard{OpenPublic: true}
	for _, s := range []string{"fe80::1%eth0", "fe80::1%lo", "::1%lo", "ff02::1%eth0"} {
		if err := g.Check("h", netip.MustParseAddr(s), 80); !errors.Is(err, ErrRefused) {
			t.Errorf("Check(%s) = %v, want ErrRefused", s, err)
		}
	}
}

func TestCheck(t *testing.T) {
	pub := netip.MustParseAddr("93.184.216.34")
	lo := netip.MustParseAddr("127.0.0.1")
	redis := fakeServers(t, "127.0.0.1:6379")
	tests := []struct {
		name  string
		guard Guard
		host  string
		addr  netip.Addr
		port  uint16
		allow bool
	}{
		{"public, OpenPublic", Guard{OpenPublic: true}, "example.com", pub, 443, true},
		{"public, not OpenPublic", Guard{}, "example.com", pub, 443, false},
		{"public IP, not OpenPublic", Guard{}, "93.184.216.34", pub, 443, false},
		{"IP rule opens it", Guard{Rules: rules(t, "127.0.0.1")}, "127.0.0.1", lo, 80, true},
		{"IP rule opens its mapped form", Guard{Rules: rules(t, "127.0.0.1")}, "::ffff:127.0.0.1", netip.MustParseAddr("::ffff:127.0.0.1"), 80, true},
		{"IP rule, another IP", Guard{Rules: rules(t, "127.0.0.1")}, "127.0.0.2", netip.MustParseAddr("127.0.0.2"), 80, false},
		{"IP rule, another IP, OpenPublic", Guard{OpenPublic: true, Rules: rules(t, "127.0.0.1")}, "127.0.0.2", netip.MustParseAddr("127.0.0.2"), 80, false},
		{"CIDR rule, inside", Guard{Rules: rules(t, "10.0.0.0/8")}, "10.1.2.3", netip.MustParseAddr("10.1.2.3"), 80, true},
		{"CIDR rule, outside", Guard{Rules: rules(t, "10.0.0.0/8")}, "11.0.0.1", netip.MustParseAddr("11.0.0.1"), 80, false},
		{"CIDR rule, refused outside", Guard{OpenPublic: true, Rules: rules(t, "10.0.0.0/8")}, "192.168.1.1", netip.MustParseAddr("192.168.1.1"), 80, false},
		{"IPv6 rule", Guard{Rules: rules(t, "::1")}, "::1", netip.MustParseAddr("::1"), 80, true},
		{"host rule opens the host", Guard{Rules: rules(t, "localhost")}, "localhost", lo, 80, true},
		{"host rule, upper case", Guard{Rules: rules(t, "localhost")}, "LocalHost", lo, 80, true},
		{"host rule, public", Guard{Rules: rules(t, "partner.example")}, "partner.example", pub, 443, true},
		{"host rule, another host", Guard{Rules: rules(t, "localhost")}, "localhost2", lo, 80, false},
		{"host rule, a subdomain", Guard{Rules: rules(t, "partner.example")}, "a.partner.example", pub, 443, false},
		{"wildcard, subdomain at a public address", Guard{Rules: rules(t, "*.example.com")}, "a.example.com", pub, 443, true},
		{"wildcard, deeper subdomain", Guard{Rules: rules(t, "*.example.com")}, "a.b.example.com", pub, 443, true},
		{"wildcard, subdomain at a refused address", Guard{Rules: rules(t, "*.example.com")}, "a.example.com", lo, 443, false},
		{"wildcard, metadata address", Guard{OpenPublic: true, Rules: rules(t, "*.example.com")}, "a.example.com", netip.MustParseAddr("169.254.169.254"), 80, false},
		{"wildcard, the domain itself", Guard{Rules: rules(t, "*.example.com")}, "example.com", pub, 443, false},
		{"wildcard, a look-alike", Guard{Rules: rules(t, "*.example.com")}, "badexample.com", pub, 443, false},
		{"deny beats an IP rule", Guard{Rules: rules(t, "127.0.0.1"), Deny: redis}, "127.0.0.1", lo, 6379, false},
		{"deny beats a host rule", Guard{Rules: rules(t, "redis.internal"), Deny: redis}, "redis.internal", lo, 6379, false},
		{"deny beats a mapped spelling", Guard{Rules: rules(t, "127.0.0.1"), Deny: redis}, "::ffff:127.0.0.1", netip.MustParseAddr("::ffff:127.0.0.1"), 6379, false},
		{"deny, another port", Guard{Rules: rules(t, "127.0.0.1"), Deny: redis}, "127.0.0.1", lo, 6380, true},
		{"deny, another loopback address", Guard{Rules: rules(t, "127.0.0.0/8"), Deny: redis}, "127.0.0.2", netip.MustParseAddr("127.0.0.2"), 6379, false},
		{"deny, another loopback address, another port", Guard{Rules: rules(t, "127.0.0.0/8"), Deny: redis}, "127.0.0.2", netip.MustParseAddr("127.0.0.2"), 6380, true},
		{"deny, the host's address", Guard{Rules: rules(t, "192.0.2.0/24"), Deny: redis}, "192.0.2.2", netip.MustParseAddr("192.0.2.2"), 6379, false},
		{"deny, a remote address on the port", Guard{Rules: rules(t, "192.0.2.0/24"), Deny: redis}, "192.0.2.3", netip.MustParseAddr("192.0.2.3"), 6379, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.guard.Check(tt.host, tt.addr, tt.port)
			if tt.allow && err != nil {
				t.Errorf("Check(%q, %s, %d) = %v, want allowed", tt.host, tt.addr, tt.port, err)
			}
			if !tt.allow && !errors.Is(err, ErrRefused) {
				t.Errorf("Check(%q, %s, %d) = %v, want ErrRefused", tt.host, tt.addr, tt.port, err)
			}
		})
	}
}

func TestCheckDenyReason(t *testing.T) {
	g := &Guard{Rules: rules(t, "127.0.0.0/8"), Deny: fakeServers(t, "127.0.0.1:6379")}
	err := g.Check("127.0.0.2", netip.MustParseAddr("127.0.0.2"), 6379)
	var re *RefusedError
	if !errors.As(err, &re) {
		t.Fatalf("Check = %v, want a *RefusedError", err)
	}
	want := RefusedError{Host: "127.0.0.2", Addr: netip.MustParseAddr("127.0.0.2"), Why: "the worker's own Redis"}
	if diff := cmp.Diff(want, *re, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("RefusedError (-want +got):\n%s", diff)
	}
}

// listen starts a TCP listener on 127.0.0.1 that accepts and closes.
func listen(t *testing.T) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return netip.MustParseAddrPort(ln.Addr().String())
}

func TestDialContext(t *testing.T) {
	ap := listen(t)
	addr := ap.String()
	other := netip.AddrPortFrom(ap.Addr(), ap.Port()+1)
	tests := []struct {
		name    string
		guard   Guard
		address string
		refused bool
	}{
		{"no rule", Guard{OpenPublic: true}, addr, true},
		{"no rule, not OpenPublic", Guard{}, addr, true},
		{"IP rule", Guard{Rules: rules(t, "127.0.0.1")}, addr, false},
		{"CIDR rule", Guard{Rules: rules(t, "127.0.0.0/8")}, addr, false},
		{"IP rule, mapped spelling", Guard{Rules: rules(t, "127.0.0.1")}, net.JoinHostPort("::ffff:127.0.0.1", strconv.Itoa(int(ap.Port()))), false},
		{"another loopback IP", Guard{Rules: rules(t, "127.0.0.2")}, addr, true},
		{"deny this port", Guard{Rules: rules(t, "127.0.0.1"), Deny: NewServers(context.Background(), []string{ap.String()}, nil)}, addr, true},
		{"deny this port at another loopback address", Guard{Rules: rules(t, "127.0.0.1"), Deny: NewServers(context.Background(), []string{"127.0.0.9:" + strconv.Itoa(int(ap.Port()))}, nil)}, addr, true},
		{"deny another port", Guard{Rules: rules(t, "127.0.0.1"), Deny: NewServers(context.Background(), []string{other.String()}, nil)}, addr, false},
		{"numeric spelling despite a rule", Guard{Rules: rules(t, "127.0.0.1"), OpenPublic: true}, net.JoinHostPort("2130706433", strconv.Itoa(int(ap.Port()))), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls atomic.Int32
			tt.guard.Resolver = noLookup(t, &calls, true)
			tt.guard.Timeout = 5 * time.Second
			c, err := tt.guard.DialContext(context.Background(), "tcp", tt.address)
			if tt.refused {
				if c != nil {
					c.Close()
				}
				if !errors.Is(err, ErrRefused) {
					t.Errorf("DialContext(%s) = %v, want ErrRefused", tt.address, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("DialContext(%s): %v", tt.address, err)
			}
			defer c.Close()
			got := netip.MustParseAddrPort(c.RemoteAddr().String())
			if got.Addr().Unmap() != ap.Addr() || got.Port() != ap.Port() {
				t.Errorf("connected to %s, want %s", got, ap)
			}
		})
	}
}

func TestDialContextBadAddress(t *testing.T) {
	g := &Guard{OpenPublic: true}
	for _, a := range []string{"127.0.0.1", "127.0.0.1:http", "127.0.0.1:70000", ""} {
		if c, err := g.DialContext(context.Background(), "tcp", a); err == nil {
			c.Close()
			t.Errorf("DialContext(%q) succeeded, want an error", a)
		}
	}
}

// Without OpenPublic, a name no host or *.domain rule names never reaches
// the resolver.
func TestDialContextNoLookupOfUnlistedName(t *testing.T) {
	var calls atomic.Int32
	g := &Guard{Rules: rules(t, "127.0.0.1", "10.0.0.0/8", "foo.test", "*.example.com"), Resolver: noLookup(t, &calls, true)}
	for _, a := range []string{"example.invalid:80", "leak-data.attacker.test:443", "example.com:443", "FOO.test.evil:80", "0x7f.1:80"} {
		c, err := g.DialContext(context.Background(), "tcp", a)
		if c != nil {
			c.Close()
		}
		if !errors.Is(err, ErrRefused) {
			t.Errorf("DialContext(%s) = %v, want ErrRefused", a, err)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("%d resolver dials, want none", n)
	}
}

// The recording resolver does see the lookups it should: the test above
// would notice one.
func TestDialContextLooksUpListedName(t *testing.T) {
	for _, tt := range []struct {
		name    string
		guard   Guard
		address string
	}{
		{"host rule", Guard{Rules: rules(t, "foo.test")}, "foo.test:80"},
		{"wildcard rule", Guard{Rules: rules(t, "*.example.test")}, "a.example.test:443"},
		{"OpenPublic", Guard{OpenPublic: true}, "anything.test:80"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var calls atomic.Int32
			tt.guard.Resolver = noLookup(t, &calls, false)
			c, err := tt.guard.DialContext(context.Background(), "tcp", tt.address)
			if c != nil {
				c.Close()
			}
			if err == nil || errors.Is(err, ErrRefused) {
				t.Errorf("DialContext(%s) = %v, want a resolver error", tt.address, err)
			}
			if calls.Load() == 0 {
				t.Errorf("DialContext(%s) made no lookup", tt.address)
			}
		})
	}
}

func TestMayResolve(t *testing.T) {
	g := &Guard{Rules: rules(t, "foo.test", "*.example.com", "10.0.0.0/8")}
	want := map[string]bool{
		"foo.test":         true,
		"FOO.TEST":         true,
		"a.example.com":    true,
		"x.y.example.com":  true,
		"127.0.0.1":        true, // an IP is checked, never resolved
		"[::1]":            true,
		"::1":              true,
		"example.com":      false,
		"bar.test":         false,
		"a.foo.test":       false,
		"example.com.evil": false,
		"badexample.com":   false,
		"2130706433":       false,
		"0x7f.1":           false,
		"":                 false,
	}
	got := map[string]bool{}
	for h := range want {
		err := g.mayResolve(h)
		if err != nil && !errors.Is(err, ErrRefused) {
			t.Errorf("mayResolve(%q) = %v, not ErrRefused", h, err)
		}
		got[h] = err == nil
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mayResolve allowed (-want +got):\n%s", diff)
	}

	open := &Guard{OpenPublic: true}
	for _, h := range []string{"bar.test", "example.com"} {
		if err := open.mayResolve(h); err != nil {
			t.Errorf("OpenPublic mayResolve(%q) = %v, want nil", h, err)
		}
	}
}

// TestRefusalNamesFlag: a refusal a rule could lift names the worker flag
// and the entry that lifts it; the Redis refusal, which none lifts, none.
func TestRefusalNamesFlag(t *testing.T) {
	fetchG := &Guard{OpenPublic: true, Flag: "-fetch-allow"}
	egressG := &Guard{Flag: "-egress-allow"}
	for _, c := range []struct {
		g                *Guard
		host, addr, want string
		open             string // an entry the hint names
	}{
		{fetchG, "127.0.0.1", "127.0.0.1", "(open it on the worker with -fetch-allow 127.0.0.1)", "127.0.0.1"},
		{fetchG, "files.internal", "10.0.0.5", "(open it on the worker with -fetch-allow 10.0.0.5, or -fetch-allow files.internal for the name wherever it resolves)", "files.internal"},
		{fetchG, "::1", "::1", "with -fetch-allow ::1)", "::1"},
		{egressG, "93.184.216.34", "93.184.216.34", "not in the allow-list (open it on the worker with -egress-allow 93.184.216.34)", "93.184.216.34"},
		{&Guard{OpenPublic: true}, "127.0.0.1", "127.0.0.1", "(open it with an IP or CIDR rule)", ""},
	} {
		err := c.g.Check(c.host, netip.MustParseAddr(c.addr), 80)
		if !errors.Is(err, ErrRefused) || !strings.HasSuffix(err.Error(), c.want) {
			t.Errorf("%s at %s: %v, want ending %q", c.host, c.addr, err, c.want)
		}
		if c.open == "" {
			continue
		}
		// The entry the hint names lets it through.
		opened := &Guard{OpenPublic: c.g.OpenPublic, Flag: c.g.Flag, Rules: []Rule{mustRule(t, c.open)}}
		if err := opened.Check(c.host, netip.MustParseAddr(c.addr), 80); err != nil {
			t.Errorf("%s at %s with %s %s: %v", c.host, c.addr, c.g.Flag, c.open, err)
		}
	}
	_, err := egressG.DialContext(context.Background(), "tcp", "exfil.example:443")
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "open it on the worker with -egress-allow exfil.example") {
		t.Errorf("an unlisted name: %v, want the -egress-allow entry", err)
	}
}

func TestRefusedErrorText(t *testing.T) {
	withAddr := &RefusedError{Host: "h", Addr: netip.MustParseAddr("10.0.0.1"), Why: "because"}
	noAddr := &RefusedError{Host: "h", Why: "because"}
	got := []string{withAddr.Error(), noAddr.Error()}
	want := []string{"h (10.0.0.1) refused: because", "h refused: because"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Error() (-want +got):\n%s", diff)
	}
	if !errors.Is(noAddr, ErrRefused) || errors.Is(errors.New("x"), ErrRefused) {
		t.Error("errors.Is(…, ErrRefused) wrong")
	}
}
