// Package csvreport is the example of Airlock's seed article: an agent
// fetches a partner's CSV export with a token, drops its parasitic
// columns, computes two indicators, and returns a summary that is
// validated before it is parked or promoted. It holds the spec, the
// script, the policy, and a tiny partner server for the demo (Partner),
// which `worker -dev` runs and `go run ./examples/csv-report/partner`
// serves on its own.
package csvreport

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"strings"

	_ "embed"

	"github.com/airlock-run/airlock/tasks"
)

//go:embed spec.json
var specJSON []byte

//go:embed clean.sh
var cleanSh string

//go:embed policy.yaml
var Policy []byte

// Spec returns the example's spec, its script filled in, fetching the
// export from base (e.g. "http://127.0.0.1:8765").
func Spec(base string) (*tasks.Spec, error) {
	s, err := tasks.Decode(specJSON)
	if err != nil {
		return nil, err
	}
	s.Files = map[string]tasks.File{"clean.sh": tasks.File(cleanSh)}
	u, err := url.Parse(s.Inputs[0].URL)
	if err != nil {
		return nil, err
	}
	b, err := url.Parse(base)
	if err != nil || b.Host == "" {
		return nil, fmt.Errorf("csvreport: base %q: want http://host:port", base)
	}
	u.Scheme, u.Host = b.Scheme, b.Host
	s.Inputs[0].URL = u.String()
	return s, nil
}

// SpecJSON returns Spec as JSON, for enqueue.
func SpecJSON(base string) ([]byte, error) {
	s, err := Spec(base)
	if err != nil {
		return nil, err
	}
	return json.MarshalIndent(s, "", "  ")
}

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
	fmt.Fprintln(w, "order_id,_sync_ts,customer,amount,status,_debug")
	statuses := []string{"paid", "paid", "paid", "paid", "paid", "paid", "paid", "paid", "paid", "pending", "refunded"}
	for i := 1; i <= max(p.Rows, 1); i++ {
		n, _ := rand.Int(rand.Reader, big.NewInt(50000))
		st := statuses[i%len(statuses)]
		fmt.Fprintf(w, "%d,2026-12-0%dT10:00:00Z,customer-%d,%d.%02d,%s,trace-%x\n", 1000+i, 1+i%9, i%37, 10+n.Int64()/100, n.Int64()%100, st, i*7919)
	}
}
