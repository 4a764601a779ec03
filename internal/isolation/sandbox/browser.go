//go:build linux

package sandbox

import (
	"os"
	"path/filepath"
)

// chromiumFlagsFile is where the view's own settings for Debian's chromium
// go: the wrapper (/usr/bin/chromium) sources every file of /etc/chromium.d
// in name order before it starts the browser; this one is sourced last
// (the view binds no host file whose name sorts after it), so a host file
// cannot undo its flags (the proxy), and a flag the step passes itself
// comes after all of them and wins.
const chromiumFlagsFile = "/etc/chromium.d/zz-airlock"

// chromiumFlags is that file: what a browser needs in the view, and why.
// See docs/isolation.md, "Browsers".
const chromiumFlags = `# Written by Airlock into every step's view (docs/isolation.md, "Browsers").
#
# --no-sandbox: Chromium's own sandbox needs user namespaces (or a setuid
# helper), which the step's syscall filter denies; it would not start.
# Airlock's boundary replaces it: the step's own root, PID, IPC and network
# namespaces, seccomp, Landlock, no capability, an unprivileged uid.
# --log-level=3: the view has no D-Bus, udev or OOM-score adjustment by
# design; without it every start prints dozens of error lines about them.
# Pass --log-level=0 to see them.
export CHROMIUM_FLAGS="$CHROMIUM_FLAGS --no-sandbox --log-level=3"
# The browser calls home as it starts (update.googleapis.com,
# accounts.google.com...) whatever flags it gets: the proxy refuses what the
# operator did not open, and the record's egress lists those refusals.
# A networked step (network: true) reaches what the operator opened through
# the worker's proxy only, loopback addresses included (Chromium would go
# to them directly, and the step's own loopback holds nothing).
if [ -n "$HTTPS_PROXY" ]; then
  export CHROMIUM_FLAGS="$CHROMIUM_FLAGS --proxy-server=$HTTPS_PROXY --proxy-bypass-list=<-loopback>"
fi
`

// hostChromiumSetting reports whether the host's /etc/chromium.d/ file n
// goes into the view: a regular file (never a link or a tree an operator
// left there) that the wrapper sources before the view's own, which must
// come last and is never replaced.
func hostChromiumSetting(n string) bool {
	if filepath.Base(n) >= filepath.Base(chromiumFlagsFile) {
		return false
	}
	fi, err := os.Lstat(n)
	return err == nil && fi.Mode().IsRegular()
}

// browserOps are the view's operations for a browser installed on the host:
// Debian's chromium wrapper gets its settings, the view's own among them.
// None when the host has no /etc/chromium.d.
func browserOps() []viewOp {
	if _, err := os.Stat("/etc/chromium.d"); err != nil {
		return nil
	}
	return []viewOp{
		{kind: opMkdir, dst: "/etc/chromium.d", mode: 0o755},
		{kind: opWrite, dst: chromiumFlagsFile, data: chromiumFlags, mode: 0o644},
	}
}
