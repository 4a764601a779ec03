//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/airlock-run/airlock/internal/isolation/confine"

	"golang.org/x/sys/unix"
)

// Landlock, applied to the calling thread only, so that the helper can
// confine the one thread that forks steps without the all-threads machinery
// (psx) a whole-process restriction needs in a Go program built with cgo.
// Every step inherits the thread's domain.

// LandlockABI returns the kernel's Landlock ABI version, or 0 and the
// reason when it has none.
func LandlockABI() (int, error) { return confine.LandlockABI() }

const fsRead = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR | unix.LANDLOCK_ACCESS_FS_EXECUTE

// devices steps may read and write outside their workspace.
var devices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}

// landlockRules is what a step's Landlock domain allows.
type landlockRules struct {
	Readable []string // read and execute beneath each
	Writable []string // every right beneath each
	Devices  []string // read, write and truncate each
	DenyTCP  bool     // no TCP bind or connect (ABI 4+)
	// ConnectPort, with DenyTCP, is the one TCP port steps may connect
	// to (the egress proxy on their loopback); 0 for none.
	ConnectPort uint16
}

// hostReadable is what a step may read when its slot has no view of its
// own and sees the host's filesystem: the system directories, the entries
// of /etc programs need (and passwd, group, hosts, nsswitch.conf,
// resolv.conf, as there is no generated /etc), /proc, the operator's binds
// and the workspace; not the rest of the host (home directories, /run,
// /var, /tmp, the store).
func hostReadable(binds []Bind, workspace string) []string {
	out := append([]string{}, systemDirs...)
	for _, pat := range append(etcEntries, "passwd", "group", "hosts", "nsswitch.conf", "resolv.conf", "hostname") {
		names, _ := filepath.Glob(filepath.Join("/etc", pat))
		out = append(out, names...)
	}
	out = append(out, "/proc", workspace)
	for _, b := range binds {
		out = append(out, b.Src)
	}
	return out
}

// restrictThread confines the calling thread to rules; with ABI 6+ it also
// scopes signals and abstract unix sockets to the domain, and with ABI 9+
// refuses pathname unix sockets outside the writable trees but those the
// domain's own processes made. Paths that do not exist are skipped. It
// returns a status for the record: "abi N (...)" or "off: reason".
func restrictThread(rules landlockRules) string {
	abi, err := LandlockABI()
	if err != nil || abi < 1 {
		return fmt.Sprintf("off: kernel has no Landlock (%v)", err)
	}
	fs := confine.HandledFS(abi)
	var net, scoped uint64
	var extras string
	if abi >= 4 && rules.DenyTCP {
		net = unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
		extras += ", tcp denied"
		if rules.ConnectPort != 0 {
			extras = fmt.Sprintf(", tcp denied but connect to port %d (the egress proxy)", rules.ConnectPort)
		}
	}
	if abi >= 6 {
		scoped = unix.LANDLOCK_SCOPE_SIGNAL | unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
		extras += ", signals and abstract sockets scoped"
	}
	if fs&unix.LANDLOCK_ACCESS_FS_RESOLVE_UNIX != 0 {
		// Granted with every other right on the writable trees only.
		extras += ", pathname sockets only in the workspace"
	}
	rs, err := confine.NewRuleset(abi, fs, net, scoped)
	if err != nil {
		return "off: create ruleset: " + err.Error()
	}
	defer rs.Close()
	for _, p := range rules.Readable {
		if err := rs.AllowPath(p, fsRead&fs); err != nil && !errors.Is(err, unix.ENOENT) {
			return "off: rule for " + p + ": " + err.Error()
		}
	}
	for _, p := range rules.Writable {
		if err := rs.AllowPath(p, fs); err != nil {
			return "off: rule for " + p + ": " + err.Error()
		}
	}
	if abi >= 4 && rules.DenyTCP && rules.ConnectPort != 0 {
		if err := rs.AllowPort(rules.ConnectPort, unix.LANDLOCK_ACCESS_NET_CONNECT_TCP); err != nil {
			return "off: rule for port " + fmt.Sprint(rules.ConnectPort) + ": " + err.Error()
		}
	}
	for _, d := range rules.Devices {
		_ = rs.AllowPath(d, (unix.LANDLOCK_ACCESS_FS_READ_FILE|unix.LANDLOCK_ACCESS_FS_WRITE_FILE|unix.LANDLOCK_ACCESS_FS_TRUNCATE)&fs)
	}
	if err := rs.RestrictSelf(); err != nil {
		return "off: restrict_self: " + err.Error()
	}
	reads := "reads only in the view"
	if len(rules.Readable) != 1 || rules.Readable[0] != "/" {
		reads = "reads only in the system directories, the workspace and the binds"
	}
	return fmt.Sprintf("abi %d (writes only in the workspace, %s%s)", abi, reads, extras)
}
