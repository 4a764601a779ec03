package tasks

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/airlock-run/airlock/policy"
)

// GrantsHint ends the errors of CheckGrants: where grants are written.
const GrantsHint = "policy secrets: section"

// CheckGrants checks the spec's use of secrets against the operator's
// grants (policy.Grant), in the order a run would use them. grant returns
// the grant of a secret when it covers this spec's run (its queue, or the
// catalog action it was expanded from), false when none does; to names
// what was looked for, for the error (`queue "x" or action "y"`).
//
// Every error is a *FieldError naming the secret and the missing grant:
// secrets[i] for a declared secret with no grant; steps[i].env["K"] for
// ${secret:NAME} in a step's environment without env: true;
// inputs[i].headers["K"] for ${secret:NAME} in a header when the grant
// names no hosts, or not the URL's host. A URL still holding a ${...}
// placeholder is checked by the worker when it fetches it (see
// policy.Grant.AllowsURL), as is every URL: this check comes first, it
// does not replace that one.
func (s *Spec) CheckGrants(grant func(name string) (policy.Grant, bool), to string) error {
	grants := make(map[string]policy.Grant, len(s.Secrets))
	for i, n := range s.Secrets {
		g, ok := grant(n)
		if !ok {
			return &FieldError{Field: fmt.Sprintf("secrets[%d]", i), Msg: fmt.Sprintf("secret %s: not granted to %s", n, to), Hint: GrantsHint}
		}
		grants[n] = g
	}
	// A use of an undeclared secret is refused by Prepare; here it has no
	// grant either.
	lookup := func(n string) policy.Grant { return grants[n] }
	for i, in := range s.Inputs {
		for _, k := range slices.Sorted(maps.Keys(in.Headers)) {
			field := fmt.Sprintf("inputs[%d].headers[%q]", i, k)
			for _, n := range SecretRefs(in.Headers[k]) {
				if err := HeaderGrant(field, n, lookup(n), in.URL, !strings.Contains(in.URL, "${")); err != nil {
					return err
				}
			}
		}
	}
	for i, st := range s.Steps {
		for _, k := range slices.Sorted(maps.Keys(st.Env)) {
			for _, n := range SecretRefs(st.Env[k]) {
				if !lookup(n).Env {
					return &FieldError{Field: fmt.Sprintf("steps[%d].env[%q]", i, k),
						Msg: fmt.Sprintf("secret %s: not granted to steps' environments (its grant lacks env: true)", n), Hint: GrantsHint}
				}
			}
		}
	}
	return nil
}

// HeaderGrant checks that secret name, used in the input header field, may
// go with a request for rawURL under grant g: g names hosts and, when
// checkHost, rawURL's host is one of them.
func HeaderGrant(field, name string, g policy.Grant, rawURL string, checkHost bool) error {
	if len(g.Hosts) == 0 {
		return &FieldError{Field: field, Msg: fmt.Sprintf("secret %s: not granted to any host (its grant names no hosts: it may not go in an input header)", name), Hint: GrantsHint}
	}
	if checkHost && !g.AllowsURL(rawURL) {
		return &FieldError{Field: field, Msg: fmt.Sprintf("secret %s: not granted to host %s (its grant's hosts: %s)", name, urlHost(rawURL), strings.Join(g.Hosts, ", ")), Hint: GrantsHint}
	}
	return nil
}

// urlHost is the host:port of a URL, quoted, for an error.
func urlHost(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return "(none: the URL does not parse)"
	}
	return fmt.Sprintf("%q", u.Host)
}

// EnvSecrets returns the names of the secrets the spec's steps see in their
// environment (${secret:NAME} in steps[].env), sorted, once each.
func (s *Spec) EnvSecrets() []string {
	var out []string
	for _, st := range s.Steps {
		for _, v := range st.Env {
			out = append(out, SecretRefs(v)...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
