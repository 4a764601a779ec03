//go:build linux

package worker

import (
	"fmt"
	"maps"
	"slices"

	"github.com/airlock-run/airlock/internal/network/fetch"
	"github.com/airlock-run/airlock/policy"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// grantFor returns the grant of secret name when the risk policy grants it
// to the spec's run: its queue, or the catalog action it was expanded
// from (spec.Action is only ever the worker's own catalog's).
func (w *Worker) grantFor(spec *tasks.Spec, name string) (policy.Grant, bool) {
	g, ok := w.cfg.RiskPolicy.Grant(name)
	return g, ok && g.Covers(spec.Queue, spec.Action)
}

// grantedTo names what a refused secret was looked for under.
func grantedTo(spec *tasks.Spec) string {
	to := fmt.Sprintf("queue %q", spec.Queue)
	if spec.Action != "" {
		to += fmt.Sprintf(" or action %q", spec.Action)
	}
	return to
}

// checkGrants checks the run's use of secrets against the risk policy's
// grants (fail closed: a secret without a grant is usable by nothing),
// before any value is read and any step runs. Hosts are checked again on
// each input's URL as it is fetched (fetchGrant). The spec's queue is the
// one the task was taken from (carryOut sets it), so that a raw enqueuer
// of one queue cannot borrow the grants of another by naming it.
func (w *Worker) checkGrants(spec *tasks.Spec) error {
	err := spec.CheckGrants(func(n string) (policy.Grant, bool) { return w.grantFor(spec, n) }, grantedTo(spec))
	if err != nil {
		return fmt.Errorf("secret refused: %w", err)
	}
	return nil
}

// fetchGrant checks, just before input i is fetched from rawURL (the URL
// the request goes to), that every secret its headers carry is granted to
// that URL's host. Redirects to another host:port get no header of the
// spec's (internal/network/fetch).
func (w *Worker) fetchGrant(spec *tasks.Spec, i int, rawURL string) error {
	in := spec.Inputs[i]
	for _, k := range slices.Sorted(maps.Keys(in.Headers)) {
		field := fmt.Sprintf("inputs[%d].headers[%q]", i, k)
		for _, n := range tasks.SecretRefs(in.Headers[k]) {
			g, ok := w.grantFor(spec, n)
			if !ok {
				return fmt.Errorf("secret refused: %w", &tasks.FieldError{Field: field,
					Msg: fmt.Sprintf("secret %s: not granted to %s", n, grantedTo(spec)), Hint: tasks.GrantsHint})
			}
			if err := tasks.HeaderGrant(field, n, g, rawURL, true); err != nil {
				return fmt.Errorf("secret refused: %w", err)
			}
		}
	}
	return nil
}

// refuseInput ends a run whose input i may not carry its secrets to its
// URL: failed, verdict error, nothing fetched.
func refuseInput(rec *record.Run, spec *tasks.Spec, i int, err error) {
	in := spec.Inputs[i]
	rec.Inputs = append(rec.Inputs, record.Input{URL: fetch.Redact(in.URL), Path: in.Path, Error: err.Error()})
	rec.State, rec.Verdict, rec.Error = record.StateFailed, record.VerdictError, err.Error()
}
