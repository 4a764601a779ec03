//go:build linux

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/redis/redisconn"
)

// What docker-compose.yml says of Redis's password and of the api and
// mcp services, read, then run: Redis with the file's flags, the api and
// the mcp server with the file's entrypoint and command under exactly the
// capabilities the file gives them (setpriv).

// composeVar is a variable as compose interpolates it: ${NAME},
// ${NAME:?message}, ${NAME:-default}.
var composeVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:?[?-][^}]*)?\}`)

// interpolate replaces each ${NAME...} of s by env[NAME]; a variable env
// does not hold fails t.
func interpolate(t *testing.T, s string, env map[string]string) string {
	t.Helper()
	return composeVar.ReplaceAllStringFunc(s, func(m string) string {
		name := composeVar.FindStringSubmatch(m)[1]
		v, ok := env[name]
		if !ok {
			t.Fatalf("docker-compose.yml uses ${%s}, which the test does not set", name)
		}
		return v
	})
}

// passwordRef matches a value that is exactly the required variable
// REDIS_PASSWORD.
var passwordRef = regexp.MustCompile(`^\$\{REDIS_PASSWORD:\?[^}]+\}$`)

// TestComposeServices checks, by reading docker-compose.yml: Redis is
// published nowhere and wants a password, which every Airlock service's
// URL carries; the api and mcp services run the image's binaries on the
// host's loopback only, with their secrets from files, the worker's store
// read-only at the worker's -store path, no capability but DAC_READ_SEARCH,
// no new privileges and a read-only root; the Dockerfile strips them.
func TestComposeServices(t *testing.T) {
	c := readCompose(t)
	redis := c.Services["redis"]
	if len(redis.Ports) != 0 {
		t.Errorf("redis publishes %v: it must not be reachable from the host", redis.Ports)
	}
	i := slices.Index(redis.Command, "--requirepass")
	if i < 0 || i+1 >= len(redis.Command) || !passwordRef.MatchString(redis.Command[i+1]) {
		t.Errorf("redis command %v: want --requirepass ${REDIS_PASSWORD:?...}", redis.Command)
	}
	if !passwordRef.MatchString(redis.Environment["REDISCLI_AUTH"]) {
		t.Errorf("redis environment %v: want REDISCLI_AUTH (the healthcheck's redis-cli authenticates)", redis.Environment)
	}
	store := flagValue(c.Services["worker"].Command, "store")
	url := regexp.MustCompile(`^redis://:\$\{REDIS_PASSWORD:\?[^}]+\}@redis:6379/0$`)
	for _, name := range []string{"worker", "api", "mcp"} {
		s, ok := c.Services[name]
		if !ok {
			t.Errorf("no %s service", name)
			continue
		}
		if !url.MatchString(s.Environment["REDIS_URL"]) {
			t.Errorf("%s: REDIS_URL %q: want redis://:${REDIS_PASSWORD:?...}@redis:6379/0", name, s.Environment["REDIS_URL"])
		}
		if s.Image != "airlock:local" || s.DependsOn["redis"].Condition != "service_healthy" || s.Restart == "" {
			t.Errorf("%s: image %q, depends_on %v, restart %q: want airlock:local, once redis is healthy, restarted", name, s.Image, s.DependsOn, s.Restart)
		}
	}
	for name, s := range c.Services {
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s publishes %q: want the host's 127.0.0.1 only", name, p)
			}
		}
	}
	for name, secretFlag := range map[string]string{"api": "tokens", "mcp": "token-file"} {
		s := c.Services[name]
		if len(s.Entrypoint) != 1 || s.Entrypoint[0] != "/usr/local/bin/"+name {
			t.Errorf("%s: entrypoint %v, want /usr/local/bin/%s", name, s.Entrypoint, name)
		}
		if _, err := os.Stat(filepath.Join("..", "cmd", name)); err != nil {
			t.Errorf("%s: the Dockerfile builds every command of cmd/, and there is no cmd/%s: %v", name, name, err)
		}
		secret, ok := strings.CutPrefix(flagValue(s.Command, secretFlag), "/run/secrets/")
		if !ok || !slices.Contains(s.Secrets, secret) || c.Secrets[secret].File == "" {
			t.Errorf("%s: -%s %q: want /run/secrets/NAME of a secret the service has, from a file (secrets: %v)", name, secretFlag, flagValue(s.Command, secretFlag), s.Secrets)
		}
		if !slices.Contains(s.Volumes, "airlock-store:"+store+":ro") {
			t.Errorf("%s: volumes %v: want airlock-store:%s:ro (the worker's -store, read-only)", name, s.Volumes, store)
		}
		if !slices.Equal(s.CapDrop, []string{"ALL"}) || !slices.Equal(s.CapAdd, []string{"DAC_READ_SEARCH"}) ||
			!slices.Contains(s.SecurityOpt, "no-new-privileges:true") || !s.ReadOnly {
			t.Errorf("%s: cap_drop %v, cap_add %v, security_opt %v, read_only %v", name, s.CapDrop, s.CapAdd, s.SecurityOpt, s.ReadOnly)
		}
	}
	if _, port, _ := strings.Cut(flagValue(c.Services["mcp"].Command, "http"), ":"); port == "" {
		t.Errorf("mcp command %v: want -http :PORT (streamable HTTP)", c.Services["mcp"].Command)
	}
	df, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if build := regexp.MustCompile(`(?m)^RUN CGO_ENABLED=0 go build .*$`).Find(df); !strings.Contains(string(build), ` -trimpath `) ||
		!strings.Contains(string(build), ` -ldflags "-s -w" `) {
		t.Errorf("Dockerfile builds with %q: want -trimpath and -ldflags \"-s -w\" (stripped binaries)", build)
	}
	gi, err := os.ReadFile("../.gitignore")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"/.env", "/secrets/"} {
		if !slices.Contains(strings.Split(string(gi), "\n"), want) {
			t.Errorf(".gitignore does not list %s, which the compose file has people create here", want)
		}
	}
}

// TestComposeRedisPassword runs redis-server with the compose file's
// command: a client without the password is refused, the file's
// healthcheck passes with the file's REDISCLI_AUTH (and fails with
// another), and the Airlock services' REDIS_URL reaches it.
func TestComposeRedisPassword(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Skip("no redis-cli")
	}
	c := readCompose(t)
	redis := c.Services["redis"]
	env := map[string]string{"REDIS_PASSWORD": "e2e-compose-" + numMarker() + "-0123456789abcdef"}
	args := []string{}
	for _, a := range redis.Command {
		args = append(args, interpolate(t, a, env))
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		t.Skip("no redis-server")
	}
	port := freeTCPPort(t)
	srv := startCmd(t, append([]string{path}, append(args[1:], "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", t.TempDir(), "--save", "")...))
	auth := interpolate(t, redis.Environment["REDISCLI_AUTH"], env)
	healthcheck := func(password string) error {
		hc := redis.Healthcheck.Test
		if len(hc) != 2 || hc[0] != "CMD-SHELL" {
			t.Fatalf("redis healthcheck %v: want [CMD-SHELL, ...]", hc)
		}
		cmd := exec.Command("sh", "-c", strings.ReplaceAll(hc[1], "redis-cli", "redis-cli -p "+strconv.Itoa(port)))
		cmd.Env = append(withoutRedisURL(os.Environ()), "REDISCLI_AUTH="+password)
		return cmd.Run()
	}
	if !eventually(10*time.Second, func() bool { return healthcheck(auth) == nil }) {
		t.Fatalf("the healthcheck does not pass with REDISCLI_AUTH of the file:\n%s", srv.logs.String())
	}
	if err := healthcheck("not-the-password"); err == nil {
		t.Error("the healthcheck passes with another password")
	}
	ctx := context.Background()
	anon, _, err := redisconn.Open(fmt.Sprintf("redis://127.0.0.1:%d/0", port))
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if err := anon.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("PING without the password: %v, want NOAUTH", err)
	}
	u := strings.Replace(interpolate(t, c.Services["worker"].Environment["REDIS_URL"], env), "@redis:6379/", fmt.Sprintf("@127.0.0.1:%d/", port), 1)
	rdb, _, err := redisconn.Open(u)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Errorf("PING with the services' REDIS_URL: %v", err)
	}
}

// startService starts the compose file's service name (its entrypoint, its
// command, then extra) as root with exactly its capabilities and no new
// privileges, its REDIS_URL the bundle's; it returns the process and,
// once it logged msg, the url that line gives.
func startService(t *testing.T, c composeFile, name, binary, msg string, b *bundle, caps []string, extra ...string) (*workerProc, string) {
	t.Helper()
	s := c.Services[name]
	argv := setprivArgs(t, caps)
	argv = append(argv[:len(argv)-1:len(argv)-1], "--no-new-privs", "--", binary)
	argv = append(append(argv, s.Command...), extra...)
	wp := startCmd(t, argv, "REDIS_URL="+b.url)
	if !eventually(20*time.Second, func() bool { return exitOf(wp, 0) >= 0 || strings.Contains(wp.logs.String(), msg) }) || exitOf(wp, 0) >= 0 {
		return wp, ""
	}
	sc := bufio.NewScanner(strings.NewReader(wp.logs.String()))
	for sc.Scan() {
		var l struct {
			Message string `json:"message"`
			URL     string `json:"url"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Message == msg {
			if eff, bnd, err := procCaps(wp.cmd.Process.Pid); err != nil || eff != capMask(caps) || bnd != capMask(caps) {
				t.Errorf("%s's capabilities: effective %#x, bounding %#x, want %#x (%v)", name, eff, bnd, capMask(caps), err)
			}
			return wp, l.URL
		}
	}
	t.Fatalf("%s logged no %q line with its url:\n%s", name, msg, wp.logs.String())
	return nil, ""
}

// hostSecret writes content as a secret file of the compose file would be
// on the host: owned by a user (uid 1000), mode 0600.
func hostSecret(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestComposeAPIAndMCP starts the api and mcp services as the compose
// file does (entrypoint, command, cap_drop ALL plus cap_add, no new
// privileges) beside a worker, their secrets owned by another user with
// mode 0600: the api enqueues a run and reads its published result from
// the worker's store; the mcp server answers with its token only. Without
// DAC_READ_SEARCH neither can read its secret and both refuse to start.
func TestComposeAPIAndMCP(t *testing.T) {
	t.Parallel()
	needRoot(t)
	c := readCompose(t)
	store := filepath.Join(t.TempDir(), "store")
	b := setup(t, "-store", store, "-policy", writePolicy(t, `{"default": "promote"}`))
	const agent = "agent-compose-e2e-0123456789"
	tokens := hostSecret(t, "agent runs:write,runs:read "+agent+"\n")
	mcpToken := hostSecret(t, "mcp-compose-e2e-0123456789abcdef\n")
	api, mcp := c.Services["api"], c.Services["mcp"]
	apiBin, mcpBin := buildAPI(t), buildMCP(t)

	_, base := startService(t, c, "api", apiBin, "api started", b, containerCaps(t, api.CapAdd, api.CapDrop),
		"-addr", "127.0.0.1:0", "-tokens", tokens)
	if base == "" {
		t.Fatal("the api did not start with the compose file's capabilities")
	}
	call := func(method, path, body string) (int, []byte) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+agent)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		out, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		return res.StatusCode, out
	}
	status, body := call("POST", "/v1/runs", fmt.Sprintf(`{"version": 1, "queue": %q, "run_id": "compose-1",
		"steps": [{"run": ["sh", "-c", "echo '{\"total\": 3}' > out/result.json"]}], "output": {"result": "out/result.json"}}`, b.queue))
	var en struct {
		TaskID string `json:"task_id"`
	}
	if status != 201 || json.Unmarshal(body, &en) != nil {
		t.Fatalf("POST /v1/runs: %d %s", status, body)
	}
	if status, body = call("GET", "/v1/runs/"+en.TaskID+"?wait=2m&until=final&queue="+b.queue, ""); status != 200 || !strings.Contains(string(body), `"state":"promoted"`) {
		t.Fatalf("until=final: %d %s\nworker logs:\n%s", status, body, b.worker.logs.String())
	}
	var pub struct {
		Where  string         `json:"where"`
		Result map[string]int `json:"result"`
	}
	if status, body = call("GET", "/v1/runs/"+en.TaskID+"/result?queue="+b.queue, ""); status != 200 || json.Unmarshal(body, &pub) != nil ||
		pub.Result["total"] != 3 || !strings.HasPrefix(pub.Where, store) {
		t.Errorf("result read from the worker's store: %d %s", status, body)
	}

	_, mcpURL := startService(t, c, "mcp", mcpBin, "mcp started", b, containerCaps(t, mcp.CapAdd, mcp.CapDrop),
		"-http", "127.0.0.1:0", "-token-file", mcpToken)
	if mcpURL == "" {
		t.Fatal("the mcp server did not start with the compose file's capabilities")
	}
	initialize := `{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "e2e", "version": "1"}}}`
	for token, want := range map[string]int{"": 401, "mcp-compose-e2e-0123456789abcdef": 200} {
		req, _ := http.NewRequest("POST", mcpURL, strings.NewReader(initialize))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("POST /mcp initialize with token %q: %d, want %d", token, res.StatusCode, want)
		}
	}

	// The one capability is needed: without it, the secret is unreadable.
	for _, svc := range []struct{ name, binary, msg, flag, file string }{
		{"api", apiBin, "api started", "-tokens", tokens},
		{"mcp", mcpBin, "mcp started", "-token-file", mcpToken},
	} {
		addr := map[string]string{"api": "-addr", "mcp": "-http"}[svc.name]
		wp, url := startService(t, c, svc.name, svc.binary, svc.msg, b, nil, addr, "127.0.0.1:0", svc.flag, svc.file)
		if url != "" || exitOf(wp, 10*time.Second) <= 0 || !strings.Contains(wp.logs.String(), "permission denied") {
			t.Errorf("%s without DAC_READ_SEARCH: url %q, exit %d: want a refusal to start, its secret unreadable:\n%s", svc.name, url, exitOf(wp, 0), wp.logs.String())
		}
	}
}
