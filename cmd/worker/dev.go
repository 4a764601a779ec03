//go:build linux && !airlock_nodev

package main

// Dev mode (-dev), for a newcomer's first run: an embedded Redis, the
// csv-report demo's partner, its action and secret grant, and its call
// enqueued once the worker serves. A production build leaves all of it
// out, examples/ included: go build -tags airlock_nodev (nodev.go).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock"
	csvreport "github.com/airlock-run/airlock/examples/csv-report"
	"github.com/airlock-run/airlock/internal/cli"
	"github.com/airlock-run/airlock/internal/redis/devredis"
	"github.com/airlock-run/airlock/policy"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/worker"
)

// devUsage is the usage line of -dev.
const devUsage = "dev mode: embedded Redis, best-effort isolation, the csv-report demo (a partner server on loopback, its token as a secret)"

// devMode is what -dev runs beside the worker.
type devMode struct {
	redis     *devredis.Server
	removeURL func() // removes cli.DevURLFile
	partner   *devPartner
	// removePartnerURL removes devPartnerFile, which the session examples
	// read to find the partner.
	removePartnerURL func()
	ownPolicy        bool   // -policy given: dev mode grants nothing
	store            string // where promoted outputs go (worker.Config.Store), for the demo's last line
}

// startDev starts dev mode's embedded Redis (on -dev-addr, or a free port
// when that is taken and -dev-addr was not given) and the demo's partner,
// and points o at them: -redis, -isolation best-effort unless given,
// -secrets-dir unless given, -fetch-allow 127.0.0.1. explicit holds the
// flags given. On error it has stopped what it started.
func startDev(o *options, explicit map[string]bool, log zerolog.Logger) (d *devMode, err error) {
	d = &devMode{ownPolicy: o.policyFile != ""}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	d.redis, err = devredis.Start(o.devAddr)
	if errors.Is(err, devredis.ErrAddrInUse) && !explicit["dev-addr"] {
		log.Warn().Str("addr", o.devAddr).Msg("address in use; the embedded Redis takes a free port instead")
		d.redis, err = devredis.Start("127.0.0.1:0")
	}
	if err != nil {
		return d, fmt.Errorf("-dev-addr: %w", err)
	}
	o.redisURL = d.redis.URL()
	if !explicit["isolation"] {
		o.isolation = worker.BestEffort
	}
	if d.removeURL, err = cli.WriteDevURL(o.redisURL); err != nil {
		return d, fmt.Errorf("dev mode: %w", err)
	}
	log.Info().Str("redis", o.redisURL).Str("url_file", cli.DevURLFile()).
		Msg("dev mode: embedded Redis; enqueue and approve in another shell use it by default (or: export REDIS_URL=" + o.redisURL + ")")
	// The demo's partner: an export behind a bearer token, on loopback,
	// which the worker's downloads may reach; the token is the worker's
	// secret PARTNER_TOKEN.
	if d.partner, err = startPartner(o.secretsDir); err != nil {
		return d, fmt.Errorf("dev mode: partner: %w", err)
	}
	if o.secretsDir == "" {
		o.secretsDir = d.partner.secretsDir
	}
	o.fetchAllow = append(o.fetchAllow, "127.0.0.1")
	if d.removePartnerURL, err = writePrivate(devPartnerFile(), d.partner.url); err != nil {
		return d, fmt.Errorf("dev mode: %w", err)
	}
	log.Info().Str("export", d.partner.url+"/export.csv").Str("url_file", devPartnerFile()).
		Msg("dev mode: the csv-report demo's partner serves its export (bearer token: the secret PARTNER_TOKEN; the session examples read its address in url_file, or PARTNER_URL)")
	return d, nil
}

// devPartnerFile is where dev mode writes its partner's URL for the
// examples run beside it (examples/python/session_report.py,
// examples/typescript/session_report.mjs): beside cli.DevURLFile.
func devPartnerFile() string {
	return filepath.Join(filepath.Dir(cli.DevURLFile()), "dev-partner-url")
}

// writePrivate writes line to path, in the private directory of
// cli.DevURLFile, and returns a func that removes it while it still holds
// line (another dev worker may have written its own since).
func writePrivate(path, line string) (func(), error) {
	if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
		return nil, err
	}
	return func() {
		if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == line {
			_ = os.Remove(path)
		}
	}, nil
}

// close stops what startDev started.
func (d *devMode) close() {
	if d.partner != nil {
		d.partner.close()
	}
	if d.removePartnerURL != nil {
		d.removePartnerURL()
	}
	if d.removeURL != nil {
		d.removeURL()
	}
	if d.redis != nil {
		_ = d.redis.Close()
	}
}

// configure adds the demo's action, pointed at the partner, to the
// catalog unless -actions defines one of its name, and, without -policy,
// sets devPolicy.
func (d *devMode) configure(cfg *worker.Config) error {
	d.store = cfg.Store
	if _, taken := cfg.Actions.Lookup(csvreport.Name); !taken {
		a, err := csvreport.Action(d.partner.url, cfg.Policy)
		if err != nil {
			return fmt.Errorf("dev mode: %w", err)
		}
		if err := cfg.Actions.Add(a); err != nil {
			return fmt.Errorf("dev mode: %w", err)
		}
	}
	if d.ownPolicy {
		return nil
	}
	p, err := devPolicy(d.partner.url, slices.Sorted(maps.Keys(cfg.Queues)))
	if err != nil {
		return fmt.Errorf("dev mode: %w", err)
	}
	cfg.RiskPolicy = p
	return nil
}

// devPartner is the csv-report demo's partner server, run by dev mode.
type devPartner struct {
	url        string
	secretsDir string // a temporary directory holding PARTNER_TOKEN
	srv        *http.Server
}

// startPartner serves the demo's export on a free loopback port, with a
// new token, written as the secret PARTNER_TOKEN into a temporary secrets
// directory (or into dir, the operator's -secrets-dir, when it has none).
func startPartner(dir string) (*devPartner, error) {
	p := &devPartner{}
	token := csvreport.NewToken()
	if dir == "" {
		d, err := os.MkdirTemp("", "airlock-dev-secrets-")
		if err != nil {
			return nil, err
		}
		dir, p.secretsDir = d, d
	}
	if b, err := os.ReadFile(filepath.Join(dir, "PARTNER_TOKEN")); err == nil {
		token = strings.TrimSpace(string(b))
	} else if err := os.WriteFile(filepath.Join(dir, "PARTNER_TOKEN"), []byte(token+"\n"), 0o600); err != nil {
		p.removeSecrets()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		p.removeSecrets()
		return nil, err
	}
	p.url = "http://" + ln.Addr().String()
	p.srv = &http.Server{Handler: &csvreport.Partner{Token: token, Rows: 500}, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// devPolicy is dev mode's risk policy when -policy gives none: every output
// parked, as without a policy, and the demo's secret granted (a worker
// grants no secret its policy does not): PARTNER_TOKEN, to runs of the
// demo's catalog action (csv-report) and to runs of the worker's queues
// (the session examples open free-form sessions on the partner's export),
// in input headers to the partner's host:port only, never in a step's
// environment.
func devPolicy(partnerURL string, queues []string) (*policy.Policy, error) {
	u, err := url.Parse(partnerURL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("partner URL %q: %v", partnerURL, err)
	}
	grant, err := json.Marshal(map[string]any{"actions": []string{csvreport.Name}, "queues": queues, "hosts": []string{u.Host}, "env": false})
	if err != nil {
		return nil, err
	}
	return policy.Parse(fmt.Appendf(nil, `{"default": "park", "secrets": {"PARTNER_TOKEN": %s}}`, grant), "json")
}

func (p *devPartner) close() {
	_ = p.srv.Close()
	p.removeSecrets()
}

// removeSecrets removes the temporary secrets directory, if the partner
// made one.
func (p *devPartner) removeSecrets() {
	if p.secretsDir != "" {
		_ = os.RemoveAll(p.secretsDir)
	}
}

// demo enqueues the csv-report example's call of its action (which dev
// mode's catalog points at the dev partner), waits for its record and
// prints it.
func (d *devMode) demo(ctx context.Context, rdb redis.UniversalClient, prefix string, stdout io.Writer, log zerolog.Logger) {
	c := airlock.NewClient(rdb, airlock.ClientOptions{Prefix: prefix})
	spec, err := csvreport.Call()
	if err == nil {
		var e airlock.Enqueued
		e, err = c.Enqueue(ctx, spec)
		if err == nil {
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			rec, werr := c.Wait(wctx, e.Queue, e.TaskID)
			if err = werr; err == nil {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				_ = enc.Encode(rec)
				ev := log.Info().Str("state", string(rec.State)).Str("verdict", string(rec.Verdict)).Str("store", d.store)
				if rec.ApprovalID != "" {
					ev = ev.Str("approval_id", rec.ApprovalID)
				}
				if next := demoNext(rec); next != "" {
					ev = ev.Str("next", next)
				}
				ev.Msg("demo (csv-report) done; the worker keeps serving (Ctrl-C to stop)")
				return
			}
		}
	}
	if ctx.Err() == nil {
		log.Error().Err(err).Msg("demo task")
	}
}

// demoNext is what the demo's last line tells the newcomer to do next:
// accept a parked output, read a promoted one back, nothing for a run
// that ended otherwise.
func demoNext(rec *record.Run) string {
	switch rec.State {
	case record.StateParked:
		return "approve accept " + rec.ApprovalID + ", then enqueue -result " + rec.TaskID
	case record.StatePromoted:
		return "enqueue -result " + rec.TaskID + " (promoted by the policy: nothing to approve)"
	}
	return ""
}
