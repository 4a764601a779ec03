package airlock_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The import graph goes one way: what a backend imports (the client, the
// spec, the record and its types, the approval store, the CLIs that talk
// to Redis) builds on every platform and never imports what runs steps,
// which is Linux-only. A portable package that starts importing a
// Linux-only one fails here, for darwin and windows.

// portable are the packages a backend (or an approver's laptop) may build.
var portable = []string{
	".", "./approve", "./contract", "./events", "./limits", "./policy", "./promote",
	"./record", "./tasks", "./internal/queuepolicy", "./cmd/enqueue", "./cmd/approve",
	"./httpapi", "./cmd/api", "./webhook",
	"./internal/mcpserver", "./cmd/mcp",
}

// linuxOnly are the packages that confine steps.
var linuxOnly = []string{
	"internal/sandbox", "internal/cgroup", "internal/collect", "tmpfs", "worker", "bench",
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
	Deps       []string
	Error      *struct{ Err string }
	DepsErrors []*struct{ Err string }
}

func goList(t *testing.T, goos string, pkgs ...string) []listed {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	cmd := exec.Command("go", append([]string{"list", "-e", "-deps=false", "-json=ImportPath,Deps,Error,DepsErrors"}, pkgs...)...)
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
	for _, goos := range []string{"darwin", "windows", "linux"} {
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
