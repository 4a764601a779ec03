package policy_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/airlock-run/airlock/policy"
)

// TestParseGrants: the secrets: section, in YAML and JSON, as Grant and
// Grants give it back: names sorted, hosts in their canonical form.
func TestParseGrants(t *testing.T) {
	yaml := `
secrets:
  PARTNER_TOKEN:
    queues: [reports, "2024"]
    hosts: [Partner.Example, "*.cdn.example:443", "127.0.0.1:8765", "[::1]:8443", "::ffff:10.0.0.1", 2001:db8::1]
  API_KEY:
    actions: [csv-report, send.mail_v2]
    env: true
`
	json := `{"secrets": {
		"PARTNER_TOKEN": {"queues": ["reports", "2024"], "hosts": ["Partner.Example", "*.cdn.example:443", "127.0.0.1:8765", "[::1]:8443", "::ffff:10.0.0.1", "2001:db8::1"]},
		"API_KEY": {"actions": ["csv-report", "send.mail_v2"], "env": true}}}`
	want := []policy.Grant{
		{Name: "API_KEY", Actions: []string{"csv-report", "send.mail_v2"}, Env: true},
		{Name: "PARTNER_TOKEN", Queues: []string{"reports", "2024"},
			Hosts: []string{"partner.example", "*.cdn.example:443", "127.0.0.1:8765", "[::1]:8443", "::ffff:10.0.0.1", "2001:db8::1"}},
	}
	for format, doc := range map[string]string{"yaml": yaml, "json": json} {
		p, err := policy.Parse([]byte(doc), format)
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if diff := cmp.Diff(want, p.Grants(), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: Grants (-want +got):\n%s", format, diff)
		}
		g, ok := p.Grant("PARTNER_TOKEN")
		if !ok || diff(want[1], g) != "" {
			t.Errorf("%s: Grant(PARTNER_TOKEN) = %+v, %v", format, g, ok)
		}
		// What a caller does to a grant never reaches the policy.
		g.Hosts[0] = "evil.example"
		if g2, _ := p.Grant("PARTNER_TOKEN"); g2.Hosts[0] != "partner.example" {
			t.Errorf("%s: the policy's grant changed through a copy: %v", format, g2.Hosts)
		}
		for _, name := range []string{"NOT_GRANTED", "partner_token", "Partner_Token"} {
			if g, ok := p.Grant(name); ok {
				t.Errorf("%s: Grant(%s) = %+v, want none", format, name, g)
			}
		}
	}
	// A worker without a policy, or a policy without the section, grants
	// nothing.
	for name, p := range map[string]*policy.Policy{"NoPolicy": policy.NoPolicy(), "nil": nil, "rules only": mustParse(t, "default: promote\n")} {
		if _, ok := p.Grant("PARTNER_TOKEN"); ok || len(p.Grants()) != 0 {
			t.Errorf("%s grants something: %v", name, p.Grants())
		}
	}
}

func diff(a, b policy.Grant) string { return cmp.Diff(a, b, cmpopts.EquateEmpty()) }

// TestParseGrantErrors: a bad grant is a *ParseError naming its line and
// field.
func TestParseGrantErrors(t *testing.T) {
	tests := []struct {
		name, format, policy, want string
	}{
		{"not a mapping", "yaml", "secrets: [PARTNER_TOKEN]\n",
			`line 1: secrets: must be a mapping of secret names to grants, not a list`},
		{"lower-case name", "yaml", "secrets:\n  partner_token: {queues: [q]}\n",
			`line 2: secrets.partner_token: "partner_token" is not a secret name: upper-case letters, digits and _, starting with a letter, at most 64 (e.g. PARTNER_TOKEN)`},
		{"name with a slash", "json", `{"secrets": {"../ETC": {"queues": ["q"]}}}`,
			`line 1: secrets.../ETC: "../ETC" is not a secret name: upper-case letters, digits and _, starting with a letter, at most 64 (e.g. PARTNER_TOKEN)`},
		{"duplicate name", "yaml", "secrets:\n  A_KEY: {queues: [q]}\n  A_KEY: {queues: [r]}\n",
			`line 3: secrets: key "A_KEY" appears twice`},
		{"grant not a mapping", "yaml", "secrets:\n  A_KEY: true\n",
			`line 2: secrets.A_KEY: must be a mapping, not true`},
		{"unknown key", "yaml", "secrets:\n  A_KEY:\n    queues: [q]\n    host: [x.example]\n",
			`line 4: secrets.A_KEY.host: unknown key "host" (known: actions, queues, hosts, env)`},
		{"neither actions nor queues", "yaml", "secrets:\n  A_KEY: {hosts: [x.example], env: true}\n",
			`line 2: secrets.A_KEY: names no actions and no queues: a grant must say which runs may use the secret`},
		{"empty queues", "yaml", "secrets:\n  A_KEY: {queues: []}\n",
			`line 2: secrets.A_KEY.queues: must list at least one queue`},
		{"bad queue", "yaml", "secrets:\n  A_KEY:\n    queues:\n      - ok\n      - a.b\n",
			`line 5: secrets.A_KEY.queues[1]: "a.b" is not a queue name: 1-64 characters of letters, digits, '_' or '-'`},
		{"bad action", "json", "{\"secrets\": {\"A_KEY\": {\"actions\": [\n\"a b\"]}}}",
			`line 2: secrets.A_KEY.actions[0]: "a b" is not an action name: 1-64 characters of letters, digits, '.', '_' or '-'`},
		{"env not a boolean", "yaml", "secrets:\n  A_KEY: {queues: [q], env: \"true\"}\n",
			`line 2: secrets.A_KEY.env: must be true or false, not the string "true"`},
		{"empty hosts", "yaml", "secrets:\n  A_KEY: {queues: [q], hosts: []}\n",
			`line 2: secrets.A_KEY.hosts: must list at least one host`},
		{"host as a URL", "yaml", "secrets:\n  A_KEY:\n    queues: [q]\n    hosts: [\"https://x.example\"]\n",
			`line 4: secrets.A_KEY.hosts[0]: "https://x.example": want a host name ("partner.example"), "*.domain", or an IP literal ("127.0.0.1", "::1"), with an optional ":port" ("[::1]:8443" for IPv6)`},
		{"host with a path", "yaml", "secrets:\n  A_KEY: {queues: [q], hosts: [x.example/api]}\n",
			`line 2: secrets.A_KEY.hosts[0]: "x.example/api": want a host name ("partner.example"), "*.domain", or an IP literal ("127.0.0.1", "::1"), with an optional ":port" ("[::1]:8443" for IPv6)`},
		{"numeric host", "yaml", "secrets:\n  A_KEY: {queues: [q], hosts: [\"127.1\"]}\n",
			`line 2: secrets.A_KEY.hosts[0]: "127.1": want a host name ("partner.example"), "*.domain", or an IP literal ("127.0.0.1", "::1"), with an optional ":port" ("[::1]:8443" for IPv6)`},
		{"bare wildcard", "yaml", "secrets:\n  A_KEY: {queues: [q], hosts: [\"*\"]}\n",
			`line 2: secrets.A_KEY.hosts[0]: "*": want a host name ("partner.example"), "*.domain", or an IP literal ("127.0.0.1", "::1"), with an optional ":port" ("[::1]:8443" for IPv6)`},
		{"wildcard over a TLD", "yaml", "secrets:\n  A_KEY: {queues: [q], hosts: [\"*.com\"]}\n",
			`line 2: secrets.A_KEY.hosts[0]: "*.com": a wildcard needs a domain of at least two labels (*.partner.example), not a whole top-level domain`},
		{"wildcard inside", "yaml", "secrets:\n  A_KEY: {queues: [q], hosts: [\"api.*.example\"]}\n",
			`line 2: secrets.A_KEY.hosts[0]: "api.*.example": want a host name ("partner.example"), "*.domain", or an IP literal ("127.0.0.1", "::1"), with an optional ":port" ("[::1]:8443" for IPv6)`},
		{"empty label", "yaml", "secrets:\n  A_KEY: {queues: [q], hosts: [\"a..example\"]}\n",
			`line 2: secrets.A_KEY.hosts[0]: "a..example": want a host name ("partner.example"), "*.domain", or an IP literal ("127.0.0.1", "::1"), with an optional ":port" ("[::1]:8443" for IPv6)`},
		{"empty port", "yaml", "secrets:\n  A_KEY: {queues: [q], hosts: [\"x.example:\"]}\n",
			`line 2: secrets.A_KEY.hosts[0]: "x.example:": want a host name ("partner.example"), "*.domain", or an IP literal ("127.0.0.1", "::1"), with an optional ":port" ("[::1]:8443" for IPv6)`},
		{"empty IPv6 port", "yaml", "secrets:\n  A_KEY: {queues: [q], hosts: [\"[::1]:\"]}\n",
			`line 2: secrets.A_KEY.hosts[0]: "[::1]:": want a host name ("partner.example"), "*.domain", or an IP literal ("127.0.0.1", "::1"), with an optional ":port" ("[::1]:8443" for IPv6)`},
		{"port 0", "yaml", "secrets:\n  A_KEY: {queues: [q], hosts: [\"x.example:0\"]}\n",
			`line 2: secrets.A_KEY.hosts[0]: "x.example:0": port "0" is not a number from 1 to 65535`},
		{"port too big", "yaml", "secrets:\n  A_KEY: {queues: [q], hosts: [\"x.example:65536\"]}\n",
			`line 2: secrets.A_KEY.hosts[0]: "x.example:65536": port "65536" is not a number from 1 to 65535`},
		{"port with a leading zero", "yaml", "secrets:\n  A_KEY: {queues: [q], hosts: [\"x.example:080\"]}\n",
			`line 2: secrets.A_KEY.hosts[0]: "x.example:080": port "080" is not a number from 1 to 65535`},
		{"IPv6 with a zone", "yaml", "secrets:\n  A_KEY: {queues: [q], hosts: [\"fe80::1%eth0\"]}\n",
			`line 2: secrets.A_KEY.hosts[0]: "fe80::1%eth0": want a host name ("partner.example"), "*.domain", or an IP literal ("127.0.0.1", "::1"), with an optional ":port" ("[::1]:8443" for IPv6)`},
		{"IPv4 in brackets", "yaml", "secrets:\n  A_KEY: {queues: [q], hosts: [\"[127.0.0.1]:80\"]}\n",
			`line 2: secrets.A_KEY.hosts[0]: "[127.0.0.1]:80": want a host name ("partner.example"), "*.domain", or an IP literal ("127.0.0.1", "::1"), with an optional ":port" ("[::1]:8443" for IPv6)`},
		{"unclosed bracket", "yaml", "secrets:\n  A_KEY: {queues: [q], hosts: [\"[::1:80\"]}\n",
			`line 2: secrets.A_KEY.hosts[0]: "[::1:80": want a host name ("partner.example"), "*.domain", or an IP literal ("127.0.0.1", "::1"), with an optional ":port" ("[::1]:8443" for IPv6)`},
		{"reserved rule name", "yaml", "rules:\n  - name: secret-in-env\n    when: {queue: [x]}\n    then: park\n",
			`line 2: rules[0].name: "secret-in-env" is reserved: decisions name it when no rule decided`},
		{"secret_in_env not a boolean", "yaml", "rules:\n  - name: a\n    when: {secret_in_env: yes}\n    then: promote\n",
			`line 3: rules[0].when.secret_in_env: must be true or false, not the string "yes"`},
	}
	for _, tt := range tests {
		t.Run(tt.format+" "+tt.name, func(t *testing.T) {
			_, err := policy.Parse([]byte(tt.policy), tt.format)
			var pe *policy.ParseError
			if !errors.As(err, &pe) || !errors.Is(err, policy.ErrInvalid) {
				t.Fatalf("Parse: %v, want a *ParseError", err)
			}
			if err.Error() != tt.want {
				t.Errorf("Parse error\n got: %s\nwant: %s", err, tt.want)
			}
		})
	}
}

// TestGrantCovers: a grant covers a run of a catalog action it names, or a
// run on a queue it names; a free-form spec ("" action) only by its queue.
func TestGrantCovers(t *testing.T) {
	g := policy.Grant{Name: "K", Actions: []string{"csv-report"}, Queues: []string{"reports"}}
	for _, c := range []struct {
		queue, action string
		want          bool
	}{
		{"reports", "", true},
		{"reports", "other", true},
		{"default", "csv-report", true},
		{"default", "", false},
		{"default", "other", false},
		{"Reports", "", false},
		{"default", "CSV-REPORT", false},
		{"", "", false},
	} {
		if got := g.Covers(c.queue, c.action); got != c.want {
			t.Errorf("Covers(%q, %q) = %v, want %v", c.queue, c.action, got, c.want)
		}
	}
	if (policy.Grant{Name: "K", Queues: []string{"q"}}).Covers("", "") {
		t.Error("an empty action matched")
	}
}

// TestGrantAllowsURL: the host of the URL a request goes to, as net/http
// dials it, against the grant's hosts.
func TestGrantAllowsURL(t *testing.T) {
	p := mustParse(t, `secrets:
  K:
    queues: [q]
    hosts: [partner.example, "*.cdn.example", "api.example:8443", "127.0.0.1:8765", "::1", "[2001:db8::2]:443"]
`)
	g, _ := p.Grant("K")
	for _, c := range []struct {
		url  string
		want bool
	}{
		{"https://partner.example/export.csv", true},
		{"http://partner.example:9999/x", true}, // no port in the grant: any port
		{"https://PARTNER.example/x", true},
		{"https://partner%2eexample/x", false}, // does not parse (nor does net/http take it)
		{"https://partner.example./x", false},  // another spelling: refused
		{"https://evil.example/?h=partner.example", false},
		{"https://partner.example@evil.example/", false},
		{"https://partner.example.evil.example/", false},
		{"https://evilpartner.example/", false},
		{"https://a.cdn.example/x", true},
		{"https://a.b.cdn.example/x", true},
		{"https://cdn.example/x", false}, // *.domain: its subdomains only
		{"https://xcdn.example/x", false},
		{"https://api.example:8443/x", true},
		{"https://api.example/x", false}, // 443, not 8443
		{"http://api.example:443/x", false},
		{"http://127.0.0.1:8765/export.csv", true},
		{"http://127.0.0.1:8766/export.csv", false},
		{"http://127.0.0.1/export.csv", false},
		{"http://127.0.0.2:8765/x", false},
		{"http://[::ffff:127.0.0.1]:8765/x", false}, // another spelling of the address: refused
		{"http://127.1:8765/x", false},
		{"http://2130706433:8765/x", false},
		{"http://[::1]:1234/x", true},
		{"http://[fe80::1%25lo]:80/x", false},
		{"https://[2001:db8::2]/x", true},
		{"http://[2001:db8::2]/x", false},
		{"ftp://partner.example/x", false},
		{"partner.example/x", false},
		{"http://%zz/", false},
		{"", false},
	} {
		if got := g.AllowsURL(c.url); got != c.want {
			t.Errorf("AllowsURL(%q) = %v, want %v", c.url, got, c.want)
		}
	}
	if (policy.Grant{Name: "K", Queues: []string{"q"}}).AllowsURL("https://partner.example/") {
		t.Error("a grant without hosts allowed a URL")
	}
}

// TestSecretInEnvDecision: a run whose steps saw a secret in their
// environment is promoted only by a matching rule that says
// secret_in_env: true; a park stands; a run without one is unaffected.
func TestSecretInEnvDecision(t *testing.T) {
	const base = `default: %s
rules:
  - name: quiet
    when: {queue: [reports]}
    then: promote
  - name: env-ok
    when: {queue: [trusted], secret_in_env: true}
    then: promote
  - name: big
    when: {queue: [trusted, reports], artifact_bytes_over: 100}
    then: park
  - name: no-env
    when: {queue: [clean], secret_in_env: false}
    then: promote
`
	envIn := func(q string) policy.Input {
		return policy.Input{Queue: q, SecretInEnv: true, SecretsInEnv: []string{"API_KEY"}}
	}
	const saw = "the steps saw secret API_KEY in their environment: only a rule that says secret_in_env: true promotes such a run"
	tests := []struct {
		name, def string
		in        policy.Input
		want      policy.Decision
	}{
		{"a promote rule without the condition is held", "park", envIn("reports"),
			park(policy.RuleSecretInEnv, saw, "rule quiet would promote, but it does not say secret_in_env: true")},
		{"without a secret in env, the same rule promotes", "park", policy.Input{Queue: "reports"},
			promote("quiet", `rule quiet: queue is "reports"`)},
		{"an explicit promote", "park", envIn("trusted"),
			promote("env-ok", `rule env-ok: queue is "trusted" and a step saw a secret in its environment`)},
		{"the explicit promote rule does not match without a secret", "park", policy.Input{Queue: "trusted"},
			park("default", "no rule matched: the policy's default is park")},
		{"a park rule still parks", "park", policy.Input{Queue: "trusted", ArtifactBytes: 101, SecretInEnv: true, SecretsInEnv: []string{"API_KEY"}},
			park("big", `rule big: queue is "trusted" and artifacts hold 101 bytes > 100`)},
		{"the default promote does not apply", "promote", envIn("elsewhere"),
			park(policy.RuleSecretInEnv, saw, "the policy's default (promote) does not apply to such a run")},
		{"the default park parks as ever", "park", envIn("elsewhere"),
			park("default", "no rule matched: the policy's default is park")},
		{"secret_in_env: false does not match", "park", envIn("clean"),
			park("default", "no rule matched: the policy's default is park")},
		{"secret_in_env: false matches a clean run", "park", policy.Input{Queue: "clean"},
			promote("no-env", `rule no-env: queue is "clean" and no step saw a secret in its environment`)},
		{"no names given", "promote", policy.Input{Queue: "reports", SecretInEnv: true},
			park(policy.RuleSecretInEnv, "the steps saw a secret in their environment: only a rule that says secret_in_env: true promotes such a run",
				"rule quiet would promote, but it does not say secret_in_env: true")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(t, fmt.Sprintf(base, tt.def))
			if diff := cmp.Diff(tt.want, p.Evaluate(tt.in)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	// A spec's approval "always" still parks an explicitly promoted run.
	p := mustParse(t, fmt.Sprintf(base, "park"))
	in := envIn("trusted")
	in.SpecApproval = policy.ApprovalAlways
	if d := p.Evaluate(in); d.Action != policy.Park || d.Rule != policy.RuleSpec {
		t.Errorf("approval always: %+v", d)
	}
	// A worker without a policy parks it, as everything.
	if d := policy.NoPolicy().Evaluate(envIn("trusted")); d.Action != policy.Park || d.Rule != policy.RuleNoPolicy {
		t.Errorf("NoPolicy: %+v", d)
	}
}

// TestGrantOneSpelling (issue 31, round 4): a grant's IP literal matches
// that address in its own family only: 127.0.0.5 is not its IPv4-mapped
// nor its IPv4-compatible IPv6 spelling, and a mapped literal matches only
// itself; an IPv6 literal matches however its text is written.
func TestGrantOneSpelling(t *testing.T) {
	p := mustParse(t, `secrets:
  K:
    queues: [q]
    hosts: ["127.0.0.5:18080", "::ffff:10.0.0.1", "[2001:db8::7]:443"]
`)
	g, _ := p.Grant("K")
	for _, c := range []struct {
		url  string
		want bool
	}{
		{"http://127.0.0.5:18080/x", true},
		{"http://[::ffff:127.0.0.5]:18080/x", false},
		{"http://[::ffff:7f00:5]:18080/x", false},
		{"http://[::127.0.0.5]:18080/x", false},
		{"http://[::ffff:0:127.0.0.5]:18080/x", false},
		{"http://[64:ff9b::127.0.0.5]:18080/x", false},
		{"http://[::ffff:10.0.0.1]/x", true},
		{"http://[::FFFF:a00:1]/x", true}, // the same IPv6 address
		{"http://10.0.0.1/x", false},
		{"https://[2001:db8::7]/x", true},
		{"https://[2001:0db8:0:0::7]/x", true},
	} {
		if got := g.AllowsURL(c.url); got != c.want {
			t.Errorf("AllowsURL(%q) = %v, want %v", c.url, got, c.want)
		}
	}
}
