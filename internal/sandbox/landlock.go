//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock, applied to the calling thread only, so that the helper can
// confine the one thread that forks steps without the all-threads machinery
// (psx) a whole-process restriction needs in a Go program built with cgo.
// Every step inherits the thread's domain.

// LandlockABI returns the kernel's Landlock ABI version, or 0 and the
// reason when it has none.
func LandlockABI() (int, error) {
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0, errno
	}
	return int(abi), nil
}

const (
	fsRead = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR | unix.LANDLOCK_ACCESS_FS_EXECUTE
	// fsFileRights are the rights that apply to a file (not a directory).
	fsFileRights = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
)

// handledFS is every filesystem right the ABI knows.
func handledFS(abi int) uint64 {
	m := uint64(0x1FFF) // ABI 1: EXECUTE .. MAKE_SYM
	if abi >= 2 {
		m |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		m |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= 5 {
		m |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	return m
}

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

// landlockNetPortAttr is struct landlock_net_port_attr (ABI 4+).
type landlockNetPortAttr struct {
	AllowedAccess uint64
	Port          uint64
}

const landlockRuleNetPort = 2 // LANDLOCK_RULE_NET_PORT

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
// scopes signals and abstract unix sockets to the domain. Paths that do
// not exist are skipped. It returns a status for the record: "abi N
// (...)" or "off: reason".
func restrictThread(rules landlockRules) string {
	abi, err := LandlockABI()
	if err != nil || abi < 1 {
		return fmt.Sprintf("off: kernel has no Landlock (%v)", err)
	}
	fs := handledFS(abi)
	attr := unix.LandlockRulesetAttr{Handled_access_fs: fs}
	size := unsafe.Sizeof(uint64(0))
	var extras string
	if abi >= 4 && rules.DenyTCP {
		attr.Handled_access_net = unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
		extras += ", tcp denied"
		if rules.ConnectPort != 0 {
			extras = fmt.Sprintf(", tcp denied but connect to port %d (the egress proxy)", rules.ConnectPort)
		}
	}
	if abi >= 4 {
		size = 2 * unsafe.Sizeof(uint64(0))
	}
	if abi >= 6 {
		attr.Scoped = unix.LANDLOCK_SCOPE_SIGNAL | unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
		size = 3 * unsafe.Sizeof(uint64(0))
		extras += ", signals and abstract sockets scoped"
	}
	rfd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if errno != 0 {
		return "off: create ruleset: " + errno.Error()
	}
	defer unix.Close(int(rfd))
	add := func(path string, access uint64) error {
		fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			access &= fsFileRights
		}
		rule := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(fd)}
		_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, rfd, unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&rule)), 0, 0, 0)
		if errno != 0 {
			return errno
		}
		return nil
	}
	for _, p := range rules.Readable {
		if err := add(p, fsRead&fs); err != nil && !errors.Is(err, unix.ENOENT) {
			return "off: rule for " + p + ": " + err.Error()
		}
	}
	for _, p := range rules.Writable {
		if err := add(p, fs); err != nil {
			return "off: rule for " + p + ": " + err.Error()
		}
	}
	if abi >= 4 && rules.DenyTCP && rules.ConnectPort != 0 {
		np := landlockNetPortAttr{AllowedAccess: unix.LANDLOCK_ACCESS_NET_CONNECT_TCP, Port: uint64(rules.ConnectPort)}
		if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, rfd, landlockRuleNetPort, uintptr(unsafe.Pointer(&np)), 0, 0, 0); errno != 0 {
			return "off: rule for port " + fmt.Sprint(rules.ConnectPort) + ": " + errno.Error()
		}
	}
	for _, d := range rules.Devices {
		_ = add(d, (unix.LANDLOCK_ACCESS_FS_READ_FILE|unix.LANDLOCK_ACCESS_FS_WRITE_FILE|unix.LANDLOCK_ACCESS_FS_TRUNCATE)&fs)
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, rfd, 0, 0); errno != 0 {
		return "off: restrict_self: " + errno.Error()
	}
	reads := "reads only in the view"
	if len(rules.Readable) != 1 || rules.Readable[0] != "/" {
		reads = "reads only in the system directories, the workspace and the binds"
	}
	return fmt.Sprintf("abi %d (writes only in the workspace, %s%s)", abi, reads, extras)
}
