package confine

import (
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

var abiOnce = sync.OnceValues(func() (int, error) {
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0, errno
	}
	return int(abi), nil
})

// LandlockABI returns the kernel's Landlock ABI version, or 0 and the
// reason when it has none. It asks the kernel once.
func LandlockABI() (int, error) { return abiOnce() }

// FileRights are the filesystem rights that apply to a file (not a
// directory); a rule on a file grants only these.
const FileRights = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE |
	unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV

// HandledFS is every filesystem right Landlock ABI abi knows.
func HandledFS(abi int) uint64 {
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
	if abi >= 9 {
		// connect(2) and sendmsg(2) to a pathname unix socket: allowed
		// beneath a rule that grants it, or to a socket of the domain.
		m |= unix.LANDLOCK_ACCESS_FS_RESOLVE_UNIX
	}
	return m
}

// Ruleset is a Landlock ruleset being built; Close it once applied.
type Ruleset struct{ fd int }

// landlockNetPortAttr is struct landlock_net_port_attr (ABI 4+).
type landlockNetPortAttr struct {
	AllowedAccess uint64
	Port          uint64
}

const landlockRuleNetPort = 2 // LANDLOCK_RULE_NET_PORT

// NewRuleset creates a ruleset of ABI abi that handles the filesystem
// rights fs, the network rights net (ABI 4+; must be 0 below) and the
// scopes scoped (ABI 6+; must be 0 below). The error is the kernel's.
func NewRuleset(abi int, fs, net, scoped uint64) (*Ruleset, error) {
	attr := unix.LandlockRulesetAttr{Handled_access_fs: fs, Handled_access_net: net, Scoped: scoped}
	size := unsafe.Offsetof(attr.Handled_access_net)
	if abi >= 4 {
		size = unsafe.Offsetof(attr.Scoped)
	}
	if abi >= 6 {
		size = unsafe.Offsetof(attr.Quiet_access_fs)
	}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if errno != 0 {
		return nil, errno
	}
	return &Ruleset{fd: int(fd)}, nil
}

// AllowPath grants access beneath path (on a file, only its FileRights).
// The error is open(2)'s (unix.ENOENT for an absent path) or the
// kernel's.
func (r *Ruleset) AllowPath(path string, access uint64) error {
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
		access &= FileRights
	}
	rule := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(fd)}
	if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(r.fd), unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&rule)), 0, 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// AllowPort grants the network rights access on TCP port (ABI 4+).
func (r *Ruleset) AllowPort(port uint16, access uint64) error {
	np := landlockNetPortAttr{AllowedAccess: access, Port: uint64(port)}
	if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(r.fd), landlockRuleNetPort, uintptr(unsafe.Pointer(&np)), 0, 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// RestrictSelf puts the calling thread (and what it forks) in the
// ruleset's domain; no_new_privs must be set. The error is the kernel's.
func (r *Ruleset) RestrictSelf() error {
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(r.fd), 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// Close releases the ruleset's descriptor.
func (r *Ruleset) Close() error { return unix.Close(r.fd) }
