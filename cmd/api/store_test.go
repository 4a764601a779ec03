package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
)

// TestResultStore: with -store, GET /v1/runs/{id}/result reads the
// output in that store, not where the run's record says (which this
// process does not see); the start line says where -redis came from.
func TestResultStore(t *testing.T) {
	q, store := redistest.Queue(t), t.TempDir()
	taskID := redistest.PromotedElsewhere(t, q, store, "a") // token a's run
	url, _, logs := start(t, "-addr", "127.0.0.1:0", "-redis", redistest.URL(t), "-store", store,
		"-tokens", tokenFile(t, "a runs:read "+token+"\n"))
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("GET", url+"/v1/runs/"+taskID+"/result", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var p struct {
		Where  string
		Result json.RawMessage
	}
	if err := json.NewDecoder(res.Body).Decode(&p); err != nil || res.StatusCode != 200 ||
		p.Where != filepath.Join(store, "r1", taskID) || string(p.Result) != `{"rows":3}` {
		t.Errorf("result: %d %+v %v", res.StatusCode, p, err)
	}
	if !strings.Contains(logs.String(), `"redis_from":"from -redis"`) {
		t.Errorf("the start line does not say where -redis came from:\n%s", logs.String())
	}
}

// TestVersion: -version prints the one version string.
func TestVersion(t *testing.T) {
	if code, out, errOut := run(t, "", "-version"); code != 0 || out != airlock.Version+"\n" || errOut != "" {
		t.Errorf("-version: exit %d, %q, %q", code, out, errOut)
	}
}
