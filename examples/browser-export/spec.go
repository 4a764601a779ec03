package browserexport

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"

	csvreport "github.com/airlock-run/airlock/examples/csv-report"
	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/tasks"
)

// Login is how the browse step logs in to the partner.
type Login struct {
	User     string
	Password string // in the spec: the demo's way
	// Secret, when set, names the secret that holds the password instead:
	// the spec declares it and the step gets ${secret:NAME} in its env,
	// which the operator's grant must allow (env: true).
	Secret string
}

// DemoLogin is the demo's credentials, in the spec.
var DemoLogin = Login{User: DemoUser, Password: DemoPassword}

// BrowseStep returns the step that drives the browser against the partner
// at base (http://host:port): mode "export" saves the CSV as in/export.csv,
// "text" prints the orders page's text.
func BrowseStep(base string, l Login, mode string) tasks.Step {
	pass := l.Password
	if l.Secret != "" {
		pass = "${secret:" + l.Secret + "}"
	}
	return tasks.Step{
		Name: "browse", Run: []string{"node", "browse.js", mode}, Timeout: limits.Duration(time.Minute),
		Env: map[string]string{
			"PARTNER_URL": strings.TrimSuffix(base, "/"), "PARTNER_USER": l.User, "PARTNER_PASSWORD": pass,
			"NODE_PATH": PlaywrightDir + "/node_modules",
		},
	}
}

// CleanStep returns the csv-report clean: in/export.csv into out/clean.csv
// and out/result.json.
func CleanStep() tasks.Step {
	return tasks.Step{Name: "clean", Run: []string{"sh", "clean.sh"}, Timeout: limits.Duration(20 * time.Second)}
}

// spec is the run's spec, steps aside.
func spec(l Login, steps []tasks.Step, session bool) []byte {
	s := map[string]any{
		"version": 1,
		"run_id":  "browser-export",
		"network": true,
		// The browser's profile of limits (docs/spec.md#limits).
		"limits":  map[string]any{"profile": "browser"},
		"timeout": "3m",
		"files":   map[string]string{"browse.js": browseJS, "clean.sh": csvreport.CleanScript()},
		"steps":   steps,
		"output": map[string]any{
			"result":    "out/result.json",
			"schema":    csvreport.ResultSchema(),
			"artifacts": []string{"out/clean.csv"},
		},
	}
	if l.Secret != "" {
		s["secrets"] = []string{l.Secret}
	}
	if session {
		s["session"] = map[string]any{"idle_timeout": "2m"}
		delete(s, "steps")
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // the scripts stay readable
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		panic(err) // maps of strings and numbers
	}
	return b.Bytes()
}

// Spec returns the run in one go against the partner at base: browse (log
// in, export), then clean; the result is validated and parked.
func Spec(base string, l Login) []byte {
	return spec(l, []tasks.Step{BrowseStep(base, l, "export"), CleanStep()}, false)
}

// SessionSpec returns the same run as a session: no step at the open; the
// caller sends SessionSteps one call at a time, looks at what each
// printed, and closes.
func SessionSpec(l Login) []byte { return spec(l, nil, true) }

// SessionSteps returns the session's calls in order, as JSON step bodies:
// look at the orders page's text, export, clean.
func SessionSteps(base string, l Login) [][]byte {
	var out [][]byte
	for _, s := range []tasks.Step{BrowseStep(base, l, "text"), BrowseStep(base, l, "export"), CleanStep()} {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(s)
		out = append(out, bytes.TrimSpace(b.Bytes()))
	}
	return out
}
