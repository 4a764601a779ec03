package netguard

import (
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
)

// TestIPv4InIPv6 (issue 31, round 4): every IPv6 spelling of an IPv4
// address is refused as that address is, before anything is dialed;
// spellings of a public address pass (as the address itself would).
func TestIPv4InIPv6(t *testing.T) {
	for _, tc := range []struct {
		host    string
		refused bool
	}{
		{"::127.0.0.1", true}, // IPv4-compatible
		{"::7f00:5", true},
		{"::10.1.2.3", true},
		{"::169.254.169.254", true},
		{"::192.168.1.1", true},
		{"::8.8.8.8", false},
		{"::ffff:127.0.0.1", true}, // IPv4-mapped
		{"::ffff:8.8.8.8", false},
		{"::ffff:0:127.0.0.1", true}, // IPv4-translated (SIIT)
		{"::ffff:0:a9fe:a9fe", true},
		{"::ffff:0:8.8.8.8", false},
		{"64:ff9b::127.0.0.1", true}, // NAT64, refused whatever it holds
		{"64:ff9b::8.8.8.8", true},
		{"64:ff9b:1::a00:1", true},
		{"2002:7f00:1::", true}, // 6to4
		{"2002:c0a8:101::1", true},
		{"2002:a9fe:a9fe::", true},
		{"2002:808:808::1", false},
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", true},  // Teredo, client 127.0.0.1
		{"2001:0:a00:1:8000:63bf:f7f7:f7f7", true},      // Teredo, server 10.0.0.1
		{"2001:0:4136:e378:8000:63bf:f7f7:f7f7", false}, // Teredo, client 8.8.8.8, public server
		{"2606:4700::1111", false},
	} {
		t.Run(tc.host, func(t *testing.T) {
			a := netip.MustParseAddr(tc.host)
			g := &Guard{OpenPublic: true}
			if got := errors.Is(g.Check(tc.host, a, 443), ErrRefused); got != tc.refused {
				t.Errorf("Check(%s) refused: %v, want %v", tc.host, got, tc.refused)
			}
			if !tc.refused {
				return
			}
			// Dialed as a URL spells it ("[::127.0.0.1]:80"): refused
			// before a connection or a lookup, on a canceled context.
			var calls atomic.Int32
			g.Resolver = noLookup(t, &calls, true)
			c, err := g.DialContext(canceled(), "tcp", net.JoinHostPort(tc.host, "80"))
			if c != nil {
				c.Close()
			}
			if !errors.Is(err, ErrRefused) || calls.Load() != 0 {
				t.Errorf("DialContext([%s]:80) = %v (%d lookups), want ErrRefused", tc.host, err, calls.Load())
			}
		})
	}
}

// TestIPv4InIPv6Rules: a rule on the IPv4 address opens its mapped
// spelling (dialed as that address), not the other spellings, which reach
// another address; a rule naming the IPv6 spelling opens it.
func TestIPv4InIPv6Rules(t *testing.T) {
	for _, tc := range []struct {
		rule, host string
		open       bool
	}{
		{"127.0.0.1", "::ffff:127.0.0.1", true},
		{"127.0.0.1", "::127.0.0.1", false},
		{"127.0.0.1", "::ffff:0:127.0.0.1", false},
		{"127.0.0.0/8", "2002:7f00:1::", false},
		{"::127.0.0.1", "::127.0.0.1", true},
		{"2002::/16", "2002:7f00:1::", true},
	} {
		g := &Guard{Rules: rules(t, tc.rule)}
		if got := g.Check(tc.host, netip.MustParseAddr(tc.host), 80) == nil; got != tc.open {
			t.Errorf("rule %s, Check(%s) open: %v, want %v", tc.rule, tc.host, got, tc.open)
		}
	}
}
