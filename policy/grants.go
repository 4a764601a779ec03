package policy

import (
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-run/airlock/record"
)

// Grant is what the policy's secrets: section grants one secret: which runs
// may use it (a run of a catalog action in Actions, or a run on a queue in
// Queues), whether their steps may see it in their environment (Env), and
// the hosts an input header carrying it may be sent to (Hosts; none: no
// header use). A secret without a grant is usable by nothing.
type Grant struct {
	Name    string   `json:"name"`
	Actions []string `json:"actions,omitempty"`
	Queues  []string `json:"queues,omitempty"`
	// Hosts are host patterns, each an exact host name
	// ("partner.example"), a "*.domain" pattern (its subdomains, not the
	// domain itself), or an IP literal ("127.0.0.1", "::1"), with an
	// optional ":port" ("[::1]:8443" for IPv6); without a port, any port.
	Hosts []string `json:"hosts,omitempty"`
	// Env allows ${secret:NAME} in steps[].env: the steps then hold the
	// value. False (the default) keeps it with the worker.
	Env bool `json:"env"`
}

// Covers reports whether the grant lets a run use its secret: a run of the
// catalog action action ("" for a free-form spec) or a run on queue.
func (g Grant) Covers(queue, action string) bool {
	return (action != "" && slices.Contains(g.Actions, action)) || slices.Contains(g.Queues, queue)
}

// AllowsURL reports whether a header carrying the secret may be sent with a
// request for rawURL: its host (as net/http dials it: the URL's host name
// and port, 80 or 443 by scheme when it names none) matches one of Hosts.
// An IP literal matches that address in that form only: "127.0.0.5" is not
// "[::ffff:127.0.0.5]" nor "[::127.0.0.5]" (IPv6 text is compared as the
// address it denotes). A URL that does not parse, or names no host, is
// allowed nowhere.
func (g Grant) AllowsURL(rawURL string) bool {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return false
	}
	port := u.Port()
	if port == "" {
		switch strings.ToLower(u.Scheme) {
		case "http":
			port = "80"
		case "https":
			port = "443"
		default:
			return false
		}
	}
	host := strings.ToLower(u.Hostname())
	addr, err := netip.ParseAddr(host)
	isIP := err == nil
	for _, h := range g.Hosts {
		p, err := parseHostPattern(h)
		if err != nil || (p.port != "" && p.port != port) {
			continue
		}
		switch {
		case p.addr.IsValid():
			if isIP && addr.Zone() == "" && addr == p.addr {
				return true
			}
		case isIP:
		case p.wildcard != "":
			if strings.HasSuffix(host, p.wildcard) && len(host) > len(p.wildcard) {
				return true
			}
		case host == p.name:
			return true
		}
	}
	return false
}

// Grant returns the grant of the secret name, and false when the policy
// grants it nothing (as a worker without a policy grants nothing).
func (p *Policy) Grant(name string) (Grant, bool) {
	if p == nil {
		return Grant{}, false
	}
	for _, g := range p.grants {
		if g.Name == name {
			return g.clone(), true
		}
	}
	return Grant{}, false
}

// Grants returns the policy's grants, sorted by name: what a worker
// publishes (names, env and hosts; the policy holds no value).
func (p *Policy) Grants() []Grant {
	if p == nil {
		return nil
	}
	out := make([]Grant, len(p.grants))
	for i, g := range p.grants {
		out[i] = g.clone()
	}
	return out
}

// clone copies g's lists, so that a caller's changes never reach the
// policy, which is shared.
func (g Grant) clone() Grant {
	g.Actions, g.Queues, g.Hosts = slices.Clone(g.Actions), slices.Clone(g.Queues), slices.Clone(g.Hosts)
	return g
}

// secretNameRE is a secret's name, as tasks.Spec's secrets take it (and
// internal/secrets looks it up: a file name, an environment variable's
// suffix).
var secretNameRE = regexp.MustCompile(`^[A-Z][A-Z0-9_]{0,63}$`)

// maxGrants bounds the secrets: section.
const maxGrants = 256

// parseSecrets parses the secrets: section: a mapping of secret names to
// grants.
func parseSecrets(n *node) ([]Grant, error) {
	if n.kind == scalarNode && n.value == nil {
		return nil, nil
	}
	if n.kind != mapNode {
		return nil, fieldErr(n, "secrets", "must be a mapping of secret names to grants, not %s", n.what())
	}
	if len(n.keys) > maxGrants {
		return nil, fieldErr(n, "secrets", "%d grants, at most %d", len(n.keys), maxGrants)
	}
	var out []Grant
	for i, name := range n.keys {
		field := "secrets." + name
		if !secretNameRE.MatchString(name) {
			return nil, fieldErr(n.vals[i], field, "%q is not a secret name: upper-case letters, digits and _, starting with a letter, at most 64 (e.g. PARTNER_TOKEN)", name)
		}
		g, err := parseGrant(n.vals[i], field)
		if err != nil {
			return nil, err
		}
		g.Name = name
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b Grant) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func parseGrant(n *node, field string) (Grant, error) {
	var g Grant
	m, err := fields(n, field, "actions", "queues", "hosts", "env")
	if err != nil {
		return g, err
	}
	if c, ok := m["actions"]; ok {
		if g.Actions, err = stringList(c, field+".actions", "action"); err != nil {
			return g, err
		}
		for i, a := range g.Actions {
			if !nameRE.MatchString(a) {
				return g, fieldErr(c.items[i], fmt.Sprintf("%s.actions[%d]", field, i), "%q is not an action name: 1-64 characters of letters, digits, '.', '_' or '-'", a)
			}
		}
	}
	if c, ok := m["queues"]; ok {
		if g.Queues, err = stringList(c, field+".queues", "queue"); err != nil {
			return g, err
		}
		for i, q := range g.Queues {
			if !queueRE.MatchString(q) {
				return g, fieldErr(c.items[i], fmt.Sprintf("%s.queues[%d]", field, i), "%q is not a queue name: 1-64 characters of letters, digits, '_' or '-'", q)
			}
		}
	}
	if g.Actions == nil && g.Queues == nil {
		return g, fieldErr(n, field, "names no actions and no queues: a grant must say which runs may use the secret")
	}
	if c, ok := m["hosts"]; ok {
		if g.Hosts, err = stringList(c, field+".hosts", "host"); err != nil {
			return g, err
		}
		for i, h := range g.Hosts {
			p, err := parseHostPattern(h)
			if err != nil {
				return g, fieldErr(c.items[i], fmt.Sprintf("%s.hosts[%d]", field, i), "%v", err)
			}
			g.Hosts[i] = p.String()
		}
	}
	if c, ok := m["env"]; ok {
		b, isBool := c.value.(bool)
		if c.kind != scalarNode || !isBool {
			return g, fieldErr(c, field+".env", "must be true or false, not %s", c.what())
		}
		g.Env = b
	}
	return g, nil
}

// hostPattern is one of a grant's hosts: an address, a host name or a
// "*.domain" pattern, with a port or none (any port).
type hostPattern struct {
	addr     netip.Addr // an IP literal, as written (an IPv4-mapped one stays IPv6)
	name     string     // an exact host name, lower case
	wildcard string     // ".domain" for *.domain
	port     string     // decimal; "" for any port
}

func (p hostPattern) String() string {
	var h string
	switch {
	case p.addr.IsValid():
		h = p.addr.String()
		if p.addr.Is6() && p.port != "" {
			h = "[" + h + "]"
		}
	case p.wildcard != "":
		h = "*" + p.wildcard
	default:
		h = p.name
	}
	if p.port != "" {
		h += ":" + p.port
	}
	return h
}

const hostForms = `want a host name ("partner.example"), "*.domain", or an IP literal ("127.0.0.1", "::1"), with an optional ":port" ("[::1]:8443" for IPv6)`

// parseHostPattern parses a grant's host. IPv4 literals must be canonical
// dotted quads: "127.1" or "0x7f.0.0.1" are refused, as the fetch guard
// refuses them.
func parseHostPattern(s string) (hostPattern, error) {
	var p hostPattern
	bad := func() (hostPattern, error) { return hostPattern{}, fmt.Errorf("%q: %s", s, hostForms) }
	host := strings.ToLower(s)
	switch {
	case strings.HasPrefix(host, "["):
		end := strings.IndexByte(host, ']')
		if end < 0 {
			return bad()
		}
		rest := host[end+1:]
		host = host[1:end]
		if rest != "" {
			port, ok := strings.CutPrefix(rest, ":")
			if !ok || port == "" {
				return bad()
			}
			p.port = port
		}
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return bad()
		}
		p.addr = a
	case strings.Count(host, ":") > 1: // a bare IPv6 literal: no port
		a, err := netip.ParseAddr(host)
		if err != nil || a.Zone() != "" {
			return bad()
		}
		p.addr = a
	default:
		if h, port, ok := strings.Cut(host, ":"); ok {
			if port == "" {
				return bad()
			}
			host, p.port = h, port
		}
		if a, err := netip.ParseAddr(host); err == nil {
			p.addr = a
			break
		}
		if rest, ok := strings.CutPrefix(host, "*."); ok {
			if !validName(rest) {
				return bad()
			}
			if !strings.Contains(rest, ".") {
				return hostPattern{}, fmt.Errorf("%q: a wildcard needs a domain of at least two labels (*.partner.example), not a whole top-level domain", s)
			}
			p.wildcard = "." + rest
			break
		}
		if !validName(host) || numericName(host) {
			return bad()
		}
		p.name = host
	}
	if p.port != "" {
		if strings.Trim(p.port, "0123456789") != "" {
			return bad()
		}
		n, err := strconv.Atoi(p.port)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != p.port {
			return hostPattern{}, fmt.Errorf("%q: port %q is not a number from 1 to 65535", s, p.port)
		}
	}
	return p, nil
}

// validName reports whether h is a host name: letters, digits, '-' and
// '.', no empty label.
func validName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// numericName reports whether h looks like a numeric IPv4 spelling other
// than a dotted quad (digits and hex labels only: "127.1", "0x7f.1"): such
// names are refused, resolvers disagree on what they mean.
func numericName(h string) bool {
	for _, label := range strings.Split(h, ".") {
		l := strings.TrimPrefix(label, "0x")
		if l == "" {
			return false
		}
		if _, err := strconv.ParseUint(l, 16, 64); err != nil {
			return false
		}
	}
	return true
}

// envHeld is the decision for a run whose steps saw a secret in their
// environment and that only rules without secret_in_env: true (held), or
// the default, would promote: it is parked.
func envHeld(in Input, held []string, def record.Action, notes []string) Decision {
	what := "a secret"
	if len(in.SecretsInEnv) > 0 {
		what = "secret " + strings.Join(in.SecretsInEnv, ", ")
	}
	reasons := []string{fmt.Sprintf("the steps saw %s in their environment: only a rule that says secret_in_env: true promotes such a run", what)}
	for _, r := range held {
		reasons = append(reasons, fmt.Sprintf("rule %s would promote, but it does not say secret_in_env: true", r))
	}
	if len(held) == 0 && def == Promote {
		reasons = append(reasons, "the policy's default (promote) does not apply to such a run")
	}
	return Decision{Action: Park, Reasons: append(reasons, notes...), Rule: RuleSecretInEnv}
}

// sessionHeld is the decision on a session's run that only rules not
// saying session: true (or the default) would promote: park.
func sessionHeld(held []string, def record.Action, notes []string) Decision {
	reasons := []string{"the run was a session, whose steps were chosen call by call: only a rule that says session: true promotes it"}
	for _, r := range held {
		reasons = append(reasons, fmt.Sprintf("rule %s would promote, but it does not say session: true", r))
	}
	if len(held) == 0 && def == Promote {
		reasons = append(reasons, "the policy's default (promote) does not apply to a session")
	}
	return Decision{Action: Park, Reasons: append(reasons, notes...), Rule: RuleSession}
}

// saysTrue reports whether a rule's when (parsed already) holds the
// condition key: true.
func saysTrue(when *node, key string) bool {
	for i, k := range when.keys {
		if b, ok := when.vals[i].value.(bool); k == key && ok && b {
			return true
		}
	}
	return false
}
