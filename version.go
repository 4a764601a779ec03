package airlock

import (
	"regexp"
	"runtime/debug"
)

// Version is Airlock's version: what every command's -version prints,
// and what the worker writes into run records ("worker": "host/pid
// VERSION") and logs, the worker's metrics label and the MCP server's
// implementation version. One variable, so that they all agree. A release
// build sets it with the linker:
//
//	go build -ldflags "-X github.com/airlock-run/airlock.Version=1.2.3" ./cmd/...
//
// Without it, a binary installed from a release tag (go install
// github.com/airlock-run/airlock/cmd/worker@v1.2.3) says that tag's
// version, 1.2.3; any other build (a checkout, whose pseudo-version would
// differ from binary to binary) says devVersion.
var Version = devVersion

// devVersion is the version of a build that names none.
const devVersion = "0.1.0-dev"

// releaseTag matches the module version of a build from a release tag,
// not a pseudo-version (v0.0.0-20261205…-abcdef) or a dirty checkout.
var releaseTag = regexp.MustCompile(`^v([0-9]+\.[0-9]+\.[0-9]+(-(alpha|beta|rc)\.?[0-9]+)?)$`)

func init() {
	if Version != devVersion {
		return // set by the linker
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		Version = versionOf(bi.Main.Version)
	}
}

// versionOf is Version for a build whose module version is mod.
func versionOf(mod string) string {
	if m := releaseTag.FindStringSubmatch(mod); m != nil {
		return m[1]
	}
	return devVersion
}
