package airlock_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The import graph goes one way: what a backend imports (the client, the
// spec, the record and its types, the approval store, the CLIs that talk
// to Redis) builds on every platform and never imports what runs steps,
// which is Linux-only. A portable package that starts importing a
// Linux-only one fails here, for darwin and windows; on Linux too, unless
// the import is one of linuxEdges (contract reading workspaces through
// tmpfs).

// portable are the packages a backend (or an approver's laptop) may build.
var portable = []string{
	".", "./approve", "./contract", "./events", "./limits", "./policy", "./promote",
	"./record", "./session", "./tasks", "./internal/redis/queuepolicy", "./cmd/enqueue", "./cmd/approve",
	"./frontend/httpapi", "./cmd/api", "./frontend/webhook",
	"./frontend/mcpserver", "./cmd/mcp",
}

// linuxOnly are the packages that confine steps or mount their workspaces.
var linuxOnly = []string{
	"internal/isolation/sandbox", "internal/isolation/cgroup", "tmpfs", "worker", "internal/bench",
}

// linuxEdges are the only imports of a Linux-only package by a portable one,
// and they exist on Linux only: contract owns the output contract, down to
// reading a run's result and collecting its artifacts, which it does through
// tmpfs in its _linux.go files. On darwin and windows those files do not
// build, so contract, like every portable package, imports nothing Linux-only
// there; on Linux, a portable package reaches tmpfs through contract alone.
var linuxEdges = map[string][]string{
	"contract": {"tmpfs"},
}

const module = "github.com/airlock-run/airlock/"

// leaves import nothing of Redis, asynq or the kernel.
var leaves = map[string][]string{
	"./record": {"github.com/redis/", "github.com/hibiken/asynq", "golang.org/x/sys/unix"},
	"./limits": {"github.com/redis/", "github.com/hibiken/asynq", "golang.org/x/sys/unix"},
	"./policy": {"github.com/redis/", "github.com/hibiken/asynq", "golang.org/x/sys/unix"},
	"./tasks":  {"github.com/redis/", "github.com/hibiken/asynq", module + "approve", module + "events"},
}

type listed struct {
	ImportPath string
	Imports    []string
	Deps       []string
	Error      *struct{ Err string }
	DepsErrors []*struct{ Err string }
}

func goList(t *testing.T, goos string, pkgs ...string) []listed {
	t.Helper()
	return goListArgs(t, goos, append([]string{"-deps=false", "-json=ImportPath,Deps,Error,DepsErrors"}, pkgs...)...)
}

// goListArgs runs go list -e with args for goos.
func goListArgs(t *testing.T, goos string, args ...string) []listed {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	cmd := exec.Command("go", append([]string{"list", "-e"}, args...)...)
	cmd.Env = append(os.Environ(), "GOOS="+goos, "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list for %s: %v", goos, err)
	}
	var res []listed
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var l listed
		if err := dec.Decode(&l); err != nil {
			t.Fatal(err)
		}
		res = append(res, l)
	}
	return res
}

func TestPortablePackagesImportNoLinuxOnlyPackage(t *testing.T) {
	for _, goos := range []string{"darwin", "windows"} {
		for _, p := range goList(t, goos, portable...) {
			if p.Error != nil {
				t.Errorf("GOOS=%s %s: %s", goos, p.ImportPath, p.Error.Err)
			}
			for _, e := range p.DepsErrors {
				t.Errorf("GOOS=%s %s: %s", goos, p.ImportPath, e.Err)
			}
			for _, d := range p.Deps {
				for _, l := range linuxOnly {
					if d == module+l {
						t.Errorf("GOOS=%s: portable %s imports Linux-only %s", goos, p.ImportPath, d)
					}
				}
			}
		}
	}
}

// On Linux, the import graph of the portable packages, less linuxEdges,
// reaches no Linux-only package: contract's collection may import tmpfs, and
// nothing else portable may import it, or anything Linux-only, by any path.
func TestPortablePackagesReachLinuxOnlyPackagesOnlyThroughContract(t *testing.T) {
	pkgs := goListArgs(t, "linux", append([]string{"-deps", "-json=ImportPath,Imports,Error,DepsErrors"}, portable...)...)
	imports := map[string][]string{}
	for _, p := range pkgs {
		if p.Error != nil {
			t.Errorf("GOOS=linux %s: %s", p.ImportPath, p.Error.Err)
		}
		imports[p.ImportPath] = p.Imports
	}
	allowed := map[[2]string]bool{}
	for from, tos := range linuxEdges {
		for _, to := range tos {
			allowed[[2]string{module + from, module + to}] = true
		}
	}
	bad := map[string]bool{}
	for _, l := range linuxOnly {
		bad[module+l] = true
	}
	// Walk from every portable package, remembering how each package was
	// reached, to name the path of an import that is not allowed.
	via := map[string]string{}
	var queue []string
	for _, p := range goList(t, "linux", portable...) {
		if _, seen := via[p.ImportPath]; !seen {
			via[p.ImportPath] = ""
			queue = append(queue, p.ImportPath)
		}
	}
	if len(queue) != len(portable) {
		t.Fatalf("go list named %d packages for the %d portable ones", len(queue), len(portable))
	}
	for len(queue) > 0 {
		from := queue[0]
		queue = queue[1:]
		for _, to := range imports[from] {
			if allowed[[2]string{from, to}] {
				continue
			}
			if _, seen := via[to]; seen {
				continue
			}
			via[to] = from
			if bad[to] {
				chain := []string{to}
				for p := from; p != ""; p = via[p] {
					chain = append([]string{p}, chain...)
				}
				t.Errorf("GOOS=linux: portable %s imports Linux-only %s: %s", chain[0], to, strings.Join(chain, " -> "))
				continue
			}
			queue = append(queue, to)
		}
	}
	// The allowed edges exist, or they should go from linuxEdges.
	for e := range allowed {
		if !slices.Contains(imports[e[0]], e[1]) {
			t.Errorf("GOOS=linux: %s does not import %s; drop it from linuxEdges", e[0], e[1])
		}
	}
}

func TestLeavesImportNoRedisOrKernel(t *testing.T) {
	for pkg, banned := range leaves {
		for _, p := range goList(t, "linux", pkg) {
			for _, d := range p.Deps {
				for _, b := range banned {
					if strings.HasPrefix(d, b) {
						t.Errorf("%s imports %s", p.ImportPath, d)
					}
				}
			}
		}
	}
}

// The production worker (go build -tags airlock_nodev ./cmd/worker, as
// the Dockerfile builds it) links nothing of dev mode: no example, no
// embedded Redis. Without the tag, `go run ./cmd/worker -dev` has both.
func TestProductionWorkerLinksNoDevMode(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	devOnly := func(dep string) bool {
		return strings.HasPrefix(dep, module+"examples/") || dep == module+"internal/redis/devredis" ||
			strings.HasPrefix(dep, "github.com/alicebob/miniredis")
	}
	for _, tags := range []string{"airlock_nodev", ""} {
		cmd := exec.Command("go", "list", "-deps", "-tags", tags, "./cmd/worker")
		cmd.Env = append(os.Environ(), "GOOS=linux", "CGO_ENABLED=0")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps -tags %q ./cmd/worker: %v", tags, err)
		}
		var dev []string
		for _, dep := range strings.Fields(string(out)) {
			if devOnly(dep) {
				dev = append(dev, dep)
			}
		}
		switch {
		case tags != "" && len(dev) > 0:
			t.Errorf("the production worker (-tags %s) links dev mode: %s", tags, strings.Join(dev, ", "))
		case tags == "" && !slices.Contains(dev, module+"examples/csv-report"):
			t.Errorf("the default worker build lacks dev mode's demo (go run ./cmd/worker -dev): dev packages %v", dev)
		}
	}
}

// frontEnds are the packages that take an approver's or a client's
// request (HTTP, MCP, webhooks out, the CLIs): every package under
// frontend/ and the commands that serve or call them. They read and decide
// approvals and queue tasks, and never confine anything.
var frontEnds = []string{"./frontend/...", "./cmd/api", "./cmd/mcp", "./cmd/approve", "./cmd/enqueue"}

// runsSteps are the packages that start or bound a step: a front end links
// none of them, by any path, on any platform. (contract's confined
// validation child reaches internal/isolation/confine on Linux, which runs
// no step.)
var runsSteps = []string{"internal/isolation/sandbox", "internal/isolation/cgroup", "worker"}

// A front end never imports the sandbox, by any path, on any platform:
// isolation is decided and done in internal/isolation/sandbox, which only the
// worker runs.
func TestFrontEndsImportNoSandbox(t *testing.T) {
	for _, goos := range []string{"linux", "darwin", "windows"} {
		listed := goList(t, goos, frontEnds...)
		if len(listed) < len(frontEnds)+2 {
			t.Fatalf("GOOS=%s: go list found %d front ends", goos, len(listed))
		}
		for _, p := range listed {
			if p.Error != nil {
				t.Errorf("GOOS=%s %s: %s", goos, p.ImportPath, p.Error.Err)
			}
			for _, d := range p.Deps {
				for _, banned := range runsSteps {
					if d == module+banned || strings.HasPrefix(d, module+banned+"/") {
						t.Errorf("GOOS=%s: front end %s imports %s", goos, p.ImportPath, d)
					}
				}
			}
		}
	}
}

// internalGroups is how internal/ is laid out: packages that confine a step
// (isolation), that talk to the network for it (network), that wire Redis
// (redis), that only tests use (testkit), that carry a run's trace
// context and export spans (tracing), and four that stand alone.
var internalGroups = map[string]bool{
	"isolation": true, "network": true, "redis": true, "testkit": true, "tracing": true,
	"bench": true, "cli": true, "metrics": true, "secrets": true,
}

// internal/ holds its groups and nothing else, and no package outside the
// test helpers imports one (testkit, or a package named *test): production
// code links no test kit.
func TestInternalLayoutAndTestHelpers(t *testing.T) {
	entries, err := os.ReadDir("internal")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !internalGroups[e.Name()] {
			t.Errorf("internal/%s is not one of the groups (isolation, network, redis, testkit) nor a known single package: give it a home and list it in internalGroups", e.Name())
		}
	}
	helper := func(p string) bool {
		return strings.HasPrefix(p, module+"internal/testkit/") || strings.HasSuffix(p, "test") && strings.HasPrefix(p, module)
	}
	for _, p := range goListArgs(t, "linux", "-json=ImportPath,Imports", "./...") {
		if helper(p.ImportPath) || strings.HasPrefix(p.ImportPath, module+"e2e") {
			continue
		}
		for _, d := range p.Imports {
			if helper(d) {
				t.Errorf("%s imports the test helper %s", p.ImportPath, d)
			}
		}
	}
}

// The approval lifecycle has one owner, package approve: every transition
// (park, decide, expire, promote) and the sink interface it publishes
// through. It imports none of the stores (promote and below), nor anything
// that runs tasks or serves requests.
func TestApproveImportsNoStoreOrCaller(t *testing.T) {
	for _, goos := range []string{"linux", "darwin", "windows"} {
		for _, p := range goList(t, goos, "./approve") {
			for _, d := range p.Deps {
				for _, banned := range []string{"promote", "worker", "frontend", "internal/isolation", "cmd"} {
					if d == module+banned || strings.HasPrefix(d, module+banned+"/") {
						t.Errorf("GOOS=%s: approve imports %s", goos, d)
					}
				}
			}
		}
	}
}

// storeUses are what a store (package promote and below) may use of
// package approve: the types of a publication, never the approval store
// or a transition. A store writes files; approve decides when.
var storeUses = []string{"Manifest", "ErrConflict", "ResultName", "Sink", "RunSummary"}

// lifecycleSteps are the Store's steps that only package approve takes:
// marking a promotion (its Promoter), repairing indexes, expiring and
// catching up (its Sweeper). Outside approve, code parks, decides
// (approve.Accept, Store.Reject) and promotes (a Promoter), never a step
// of these.
var lifecycleSteps = []string{"MarkPromoted", "MarkPromotedOps", "Reindex", "ExpireDue", "ListAccepted"}

// approvalKeys matches a string literal that spells a key of the approval
// store (an approval's hash, an index): only package approve reads or
// writes them.
var approvalKeys = regexp.MustCompile(`approval:\{|approvals:(pending|expiry|accepted|unpromoted|rejected|expired|all)\b|^audit$|^staged$`)

// Only package approve writes approval state: outside it, no source file
// (tests aside) spells the store's keys or takes one of lifecycleSteps,
// and the stores use approve's types only.
func TestApprovalLifecycleHasOneOwner(t *testing.T) {
	inApprove := func(dir string) bool { return dir == "approve" }
	notTest := func(path string) bool { return !strings.HasSuffix(path, "_test.go") }
	eachGoFile(t, 100, parser.SkipObjectResolution, inApprove, notTest, func(fset *token.FileSet, path string, f *ast.File) {
		store := path == "promote" || strings.HasPrefix(path, "promote/")
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if n.Kind == token.STRING {
					if s, err := strconv.Unquote(n.Value); err == nil && approvalKeys.MatchString(s) {
						t.Errorf("%s: %q spells a key of the approval store, which only package approve touches", fset.Position(n.Pos()), s)
					}
				}
			case *ast.SelectorExpr:
				if id, ok := n.X.(*ast.Ident); ok && id.Name == "approve" && store && !slices.Contains(storeUses, n.Sel.Name) {
					t.Errorf("%s: a store uses approve.%s; stores use only %v of approve", fset.Position(n.Pos()), n.Sel.Name, storeUses)
				}
				if slices.Contains(lifecycleSteps, n.Sel.Name) {
					t.Errorf("%s: .%s is a step of the approval lifecycle, which only package approve takes", fset.Position(n.Pos()), n.Sel.Name)
				}
			}
			return true
		})
	})
}

// exporters are the commands that export spans (internal/tracing/otlp,
// opt-in by OTEL_EXPORTER_OTLP_ENDPOINT): only they link OpenTelemetry's
// SDK and the OTLP exporter, and none links gRPC. Every other package, the client and the
// CLIs included, uses OpenTelemetry's API alone: its spans cost nothing
// without an SDK, and trace context still propagates.
var exporters = []string{"./cmd/worker", "./cmd/api"}

func TestOnlyExportersLinkTheOTLPExporter(t *testing.T) {
	sdk := func(dep string) bool {
		return strings.HasPrefix(dep, "go.opentelemetry.io/otel/sdk") || strings.HasPrefix(dep, "go.opentelemetry.io/otel/exporters/") ||
			strings.HasPrefix(dep, "google.golang.org/grpc")
	}
	pkgs := append([]string{".", "./approve", "./worker", "./frontend/httpapi", "./cmd/enqueue", "./cmd/approve", "./internal/tracing"}, exporters...)
	for _, p := range goList(t, "linux", pkgs...) {
		var linked []string
		api := false
		for _, d := range p.Deps {
			if sdk(d) {
				linked = append(linked, d)
			}
			api = api || d == "go.opentelemetry.io/otel/trace"
		}
		export := slices.Contains(exporters, "./"+strings.TrimPrefix(p.ImportPath, module))
		switch {
		case export && !slices.Contains(p.Deps, module+"internal/tracing/otlp"):
			t.Errorf("%s exports spans but does not link the OTLP/HTTP exporter", p.ImportPath)
		case slices.ContainsFunc(linked, func(d string) bool { return strings.HasPrefix(d, "google.golang.org/grpc") }):
			t.Errorf("%s links gRPC: the OTLP exporter is internal/tracing/otlp's, protobuf over HTTP built with the OTLP protos' message packages (go.opentelemetry.io/proto/otlp), which hold no gRPC", p.ImportPath)
		case !export && len(linked) > 0:
			t.Errorf("%s links %s: only %v export spans", p.ImportPath, strings.Join(linked, ", "), exporters)
		case !api:
			t.Errorf("%s does not link OpenTelemetry's trace API: is trace context carried?", p.ImportPath)
		}
	}
}
