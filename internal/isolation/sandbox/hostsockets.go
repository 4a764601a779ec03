//go:build linux

package sandbox

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Host sockets. A pathname unix socket is found by its inode: a step that
// sees a host tree (the system directories, /etc entries, a -ro-bind
// source) could connect(2) or sendmsg(2) to any socket the host makes
// there, at any time, whatever its mount's read-only flag, its network
// namespace or Landlock up to ABI 8 say. The kernel asks for write access
// to the socket's inode first, and refuses write access to an inode whose
// owner has no mapping in its mount's idmapping (HAS_UNMAPPED_ID, root
// included): so a worker that is root attaches every host tree of the view
// idmapped with a user namespace that maps one id no file has
// (idmapOnlyID). Every file there shows as owned by nobody (steps read it
// by its mode's "other" bits, as a slot uid, with no group of the host's,
// always did), and every socket there, present or created later, answers
// EACCES. The workspace is not idmapped: a step's own sockets there keep
// working. Landlock ABI 9 (LANDLOCK_ACCESS_FS_RESOLVE_UNIX) says the same
// in the kernel where it exists (landlock.go).

// idmapOnlyID is the one uid and gid the view's idmapping maps (to
// itself): an id no file of the host has, so that every owner is unmapped.
const idmapOnlyID = 4294967290

// idmapArg is argv[1] of the process whose user namespace the view's
// idmapped trees use: it waits for its stdin to close, and exits.
const idmapArg = "__airlock_idmap_userns"

// maybeIDMapHolder runs the holder of the idmapping's user namespace and
// exits when the process was started as one.
func maybeIDMapHolder() {
	if len(os.Args) < 2 || os.Args[1] != idmapArg {
		return
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// idmapUserNS is a descriptor of the user namespace of the view's
// idmapping, made once per worker (a child of this binary in a new user
// namespace, its maps written, the namespace opened, the child gone), or
// why there is none.
var idmapUserNS = sync.OnceValues(func() (*os.File, error) {
	cmd := exec.Command("/proc/self/exe", idmapArg)
	cmd.Env, cmd.Dir = []string{}, "/"
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	one := []syscall.SysProcIDMap{{ContainerID: idmapOnlyID, HostID: idmapOnlyID, Size: 1}}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: one, GidMappings: one,
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		stdin.Close()
		return nil, fmt.Errorf("user namespace: %w", err)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	stdin.Close()
	_ = cmd.Wait()
	if err != nil {
		return nil, fmt.Errorf("user namespace: %w", err)
	}
	return f, nil
})

// idmapFD is the descriptor number a helper gets the idmapping's user
// namespace on (after its control socket, 3).
const idmapFD = 4

// holdIDMap, called first thing in a helper, reports whether descriptor
// idmapFD came from the worker (open, not close-on-exec: what exec hands
// down), and marks it close-on-exec so that no step inherits it; the
// number stays taken until takeIDMap, so the runtime cannot reuse it.
func holdIDMap() bool {
	flags, err := unix.FcntlInt(idmapFD, unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC != 0 {
		return false
	}
	unix.CloseOnExec(idmapFD)
	return true
}

// takeIDMap returns the descriptor of the idmapping's user namespace when
// the worker sent one (held), or -1; one it did not announce (something
// inherited by accident) is closed.
func (h *helper) takeIDMap(held bool) int {
	switch {
	case held && h.cfg.IDMap:
		return idmapFD
	case held:
		unix.Close(idmapFD)
	case h.cfg.IDMap:
		h.cfg.NoIDMap = "the worker's user namespace for idmapped mounts did not arrive"
	}
	return -1
}

// idmap attaches t idmapped: every owner unmapped, so that no unix socket
// in it can be connected to.
func (t tree) idmap(userns int) error {
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns)}
	if err := unix.MountSetattr(t.fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		return fmt.Errorf("its filesystem refused an idmapped mount: %w", err)
	}
	return nil
}

// socketsTier words, for the root tier, what the view's host trees do
// with unix sockets: refused in every one, or the trees where a socket
// the host makes is reachable and why.
func socketsTier(ops []viewOp, noIDMap string) string {
	if noIDMap != "" {
		return "unix sockets the host makes in its trees reachable (" + noIDMap + ")"
	}
	var open []string
	why := ""
	for _, op := range ops {
		if op.tree == nil || !op.tree.dir || !op.hostTree {
			continue
		}
		if op.idmapped {
			continue
		}
		open = append(open, op.dst)
		if why == "" {
			why = op.idmapErr
		}
	}
	if len(open) == 0 {
		return "host trees idmapped: their unix sockets refused"
	}
	if why == "" {
		why = "not idmapped"
	}
	return "unix sockets the host makes reachable in " + strings.Join(open, " ") + " (" + why + ")"
}
