//go:build linux

package worker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/internal/tracing"
	"github.com/airlock-run/airlock/policy"
	"github.com/airlock-run/airlock/record"
)

// TestCheckGrants: the worker's own check of a spec's secrets against its
// risk policy's grants, by queue or by the catalog action the spec was
// expanded from; fail closed without a policy.
func TestCheckGrants(t *testing.T) {
	p, err := policy.Parse([]byte(`{"secrets": {
		"PARTNER_TOKEN": {"actions": ["csv-report"], "queues": ["reports"], "hosts": ["127.0.0.1:8765"]},
		"ENV_KEY": {"queues": ["reports"], "env": true}}}`), "json")
	if err != nil {
		t.Fatal(err)
	}
	header := `"inputs": [{"url": "http://127.0.0.1:8765/x", "path": "in/x", "headers": {"Authorization": "Bearer ${secret:PARTNER_TOKEN}"}}]`
	for _, tt := range []struct {
		name, pol, queue, action, spec, want string
	}{
		{"granted by queue", "p", "reports", "", `{"version": 1, "secrets": ["PARTNER_TOKEN"], ` + header + `, "steps": [{"run": ["true"]}]}`, ""},
		{"granted by action", "p", "default", "csv-report", `{"version": 1, "secrets": ["PARTNER_TOKEN"], ` + header + `, "steps": [{"run": ["true"]}]}`, ""},
		{"not granted", "p", "default", "", `{"version": 1, "secrets": ["PARTNER_TOKEN"], "steps": [{"run": ["true"]}]}`,
			`secret refused: secrets[0]: secret PARTNER_TOKEN: not granted to queue "default" (policy secrets: section)`},
		{"another action", "p", "default", "other", `{"version": 1, "secrets": ["PARTNER_TOKEN"], "steps": [{"run": ["true"]}]}`,
			`secret refused: secrets[0]: secret PARTNER_TOKEN: not granted to queue "default" or action "other" (policy secrets: section)`},
		{"env not granted", "p", "reports", "", `{"version": 1, "secrets": ["PARTNER_TOKEN"], "steps": [{"run": ["true"], "env": {"T": "${secret:PARTNER_TOKEN}"}}]}`,
			`secret refused: steps[0].env["T"]: secret PARTNER_TOKEN: not granted to steps' environments (its grant lacks env: true) (policy secrets: section)`},
		{"env granted", "p", "reports", "", `{"version": 1, "secrets": ["ENV_KEY"], "steps": [{"run": ["true"], "env": {"T": "${secret:ENV_KEY}"}}]}`, ""},
		{"no policy grants nothing", "", "reports", "", `{"version": 1, "secrets": ["ENV_KEY"], "steps": [{"run": ["true"]}]}`,
			`secret refused: secrets[0]: secret ENV_KEY: not granted to queue "reports" (policy secrets: section)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			risk := policy.NoPolicy()
			if tt.pol != "" {
				risk = p
			}
			w := &Worker{log: zerolog.Nop(), cfg: Config{RiskPolicy: risk}, tr: tracing.Tracer(nil)}
			sp := spec(t, tt.spec)
			sp.Queue, sp.Action = tt.queue, tt.action
			err := w.checkGrants(sp)
			if got := errText(err); got != tt.want {
				t.Errorf("checkGrants:\n got %s\nwant %s", got, tt.want)
			}
		})
	}
	// At fetch time, on the URL the request goes to.
	w := &Worker{log: zerolog.Nop(), cfg: Config{RiskPolicy: p}, tr: tracing.Tracer(nil)}
	sp := spec(t, `{"version": 1, "queue": "reports", "secrets": ["PARTNER_TOKEN"], `+header+`, "steps": [{"run": ["true"]}]}`)
	if err := w.fetchGrant(sp, 0, "http://127.0.0.1:8765/x?y"); err != nil {
		t.Errorf("fetchGrant of the granted host: %v", err)
	}
	for _, u := range []string{"http://127.0.0.1:8766/x", "http://127.0.0.2:8765/x", "http://localhost:8765/x"} {
		if err := w.fetchGrant(sp, 0, u); err == nil || !strings.Contains(err.Error(), `inputs[0].headers["Authorization"]: secret PARTNER_TOKEN: not granted to host`) {
			t.Errorf("fetchGrant(%s): %v", u, err)
		}
	}
	rec := &record.Run{}
	refuseInput(rec, sp, 0, w.fetchGrant(sp, 0, "http://127.0.0.2:8765/x"))
	if rec.State != record.StateFailed || rec.Verdict != record.VerdictError || len(rec.Inputs) != 1 || rec.Inputs[0].Status != 0 || rec.Inputs[0].Error != rec.Error {
		t.Errorf("refused input's record: %+v", rec)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestDecideSecretInEnv: the output phase tells the policy the steps saw a
// secret in their environment: parked unless a rule that says
// secret_in_env: true promotes.
func TestDecideSecretInEnv(t *testing.T) {
	specJS := `{"version": 1, "secrets": ["ENV_KEY"], "steps": [{"run": ["true"], "env": {"K": "${secret:ENV_KEY}"}}],
		"output": {"result": "out/result.json"}}`
	for _, tt := range []struct {
		name, policy string
		state        record.State
		rule, reason string
	}{
		{"a promote rule without the condition", `{"rules": [{"name": "all", "when": {"queue": ["q"]}, "then": "promote"}]}`,
			record.StateParked, policy.RuleSecretInEnv, "the steps saw secret ENV_KEY in their environment"},
		{"an explicit promote", `{"rules": [{"name": "env-ok", "when": {"queue": ["q"], "secret_in_env": true}, "then": "promote"}]}`,
			record.StatePromoted, "env-ok", "a step saw a secret in its environment"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w, _ := phaseWorker(t, tt.policy)
			sp := spec(t, specJS)
			sp.Queue = "q"
			rec := &record.Run{TaskID: "task-" + strings.ReplaceAll(tt.name, " ", "-"), RunID: sp.RunID, Queue: "q", State: record.StateCompleted, Verdict: record.VerdictOK}
			j := &job{spec: sp, seat: seat{slot: &slot{uidN: -1}}, rec: rec, aid: approvalID(rec.TaskID, []byte(specJS+tt.name))}
			out := w.output(context.Background(), j, workspace(t, map[string]string{"out/result.json": `{"n": 1}`}), time.Now().Add(time.Minute))
			if out.err != nil {
				t.Fatal(out.err)
			}
			if rec.State != tt.state || rec.Decision == nil || rec.Decision.Rule != tt.rule || !strings.Contains(strings.Join(rec.Decision.Reasons, "; "), tt.reason) {
				t.Errorf("record: %s, decision %+v", rec.State, rec.Decision)
			}
		})
	}
}
