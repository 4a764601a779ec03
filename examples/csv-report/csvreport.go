// Package csvreport is the example of Airlock's seed article: an agent
// fetches a partner's CSV export with a token, drops its parasitic
// columns, computes two indicators, and returns a summary that is
// validated before it is parked or promoted. It holds the action's
// definition (actions/csv-report.yaml: the script, the input, the output
// contract), a call of it (spec.json), the policy, and a tiny partner
// server for the demo (Partner),
// which `worker -dev` runs and `go run ./examples/csv-report/partner`
// serves on its own.
package csvreport

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"strings"

	_ "embed"

	"go.yaml.in/yaml/v3"

	"github.com/airlock-run/airlock/actions"
	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/tasks"
)

//go:embed spec.json
var callJSON []byte

//go:embed actions/csv-report.yaml
var definition []byte

//go:embed policy.yaml
var Policy []byte

// Name is the example's action name.
const Name = "csv-report"

// defaultBase is the partner's address in the definition's file.
const defaultBase = "http://127.0.0.1:8765"

// Definition returns the action's definition (YAML, as in
// actions/csv-report.yaml), fetching the export from base (e.g.
// "http://127.0.0.1:8765").
func Definition(base string) ([]byte, error) {
	b, err := url.Parse(base)
	if err != nil || (b.Scheme != "http" && b.Scheme != "https") || b.Host == "" || (b.Path != "" && b.Path != "/") {
		return nil, fmt.Errorf("csvreport: base %q: want http://host:port", base)
	}
	return bytes.ReplaceAll(definition, []byte(defaultBase+"/"), []byte(b.Scheme+"://"+b.Host+"/")), nil
}

// Action returns the action's definition fetching from base, prepared
// against p, for a worker's catalog.
func Action(base string, p limits.Policy) (*actions.Definition, error) {
	d, err := Definition(base)
	if err != nil {
		return nil, err
	}
	return actions.Parse(Name, d, "yaml", p)
}

// Call returns the example's call of the action (spec.json): its name
// and a day.
func Call() (*tasks.Spec, error) { return tasks.Decode(callJSON) }

// CallJSON returns spec.json, for enqueue.
func CallJSON() []byte { return bytes.Clone(callJSON) }

// NewToken returns a random bearer token.
func NewToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Partner serves /export.csv, a generated export of rows orders, to
// requests that carry "Authorization: Bearer <Token>"; 401 otherwise.
type Partner struct {
	Token string
	Rows  int
}

// ServeHTTP implements http.Handler.
func (p *Partner) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/export.csv" {
		http.NotFound(w, r)
		return
	}
	got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if subtle.ConstantTimeCompare([]byte(got), []byte(p.Token)) != 1 {
		http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
		return
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	WriteExport(w, p.Rows)
}

// WriteExport writes a generated export of rows orders (at least one) as
// CSV: a header, then one line per order, with two parasitic columns
// (_sync_ts, _debug) among order_id, customer, amount and status.
func WriteExport(w io.Writer, rows int) {
	fmt.Fprintln(w, "order_id,_sync_ts,customer,amount,status,_debug")
	statuses := []string{"paid", "paid", "paid", "paid", "paid", "paid", "paid", "paid", "paid", "pending", "refunded"}
	for i := 1; i <= max(rows, 1); i++ {
		n, _ := rand.Int(rand.Reader, big.NewInt(50000))
		st := statuses[i%len(statuses)]
		fmt.Fprintf(w, "%d,2026-12-0%dT10:00:00Z,customer-%d,%d.%02d,%s,trace-%x\n", 1000+i, 1+i%9, i%37, 10+n.Int64()/100, n.Int64()%100, st, i*7919)
	}
}

// CleanScript returns the action's clean.sh: in/export.csv cleaned into
// out/clean.csv, its indicators into out/result.json.
func CleanScript() string {
	var d struct {
		Spec struct {
			Files map[string]string `yaml:"files"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(definition, &d); err != nil {
		panic("csvreport: the embedded definition: " + err.Error())
	}
	return d.Spec.Files["clean.sh"]
}

// ResultSchema returns the action's output schema: rows, paid_revenue and
// refund_rate.
func ResultSchema() map[string]any {
	var d struct {
		Spec struct {
			Output struct {
				Schema map[string]any `yaml:"schema"`
			} `yaml:"output"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(definition, &d); err != nil {
		panic("csvreport: the embedded definition: " + err.Error())
	}
	return d.Spec.Output.Schema
}
