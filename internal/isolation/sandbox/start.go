//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// start starts the slot's helper and waits for its hello. Whatever it
// opened is closed by one deferred cleanup when it fails, the helper
// killed and waited for; the descriptors handed to the helper are closed
// in the worker once sent, whatever happens, each by its *os.File (a
// second Close is refused, never a close of a number another goroutine
// reuses: slots start in parallel).
func (s *Slot) start() (err error) {
	if s.cfg.Egress != nil && !s.cfg.Namespaces {
		return errors.New("egress needs a network namespace of the slot's own (root, or user namespaces)")
	}
	if s.started && !s.renewed && s.cfg.Restarted != nil {
		s.cfg.Restarted()
	}
	s.started, s.renewed = true, false
	var undo []func() // in reverse order when start fails
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	ours, theirs, err := s.socketPair("socketpair", "helper-control")
	if err != nil {
		return err
	}
	defer theirs.Close() // the helper's end: ours to close once it started
	undo = append(undo, func() { ours.Close() })
	hc := helperConfig{
		UID: s.cfg.UID, GID: s.cfg.GID, Workspace: s.cfg.Workspace,
		Namespace: s.cfg.Namespaces, NetNS: s.cfg.Namespaces,
		Egress: s.cfg.Egress != nil, Landlock: s.cfg.Landlock, UserNS: s.cfg.Namespaces && s.cfg.UserNS,
		View: s.cfg.Namespaces && s.cfg.View, Binds: s.cfg.Binds,
	}
	var userns *os.File
	switch {
	case hc.View && hc.UserNS:
		hc.NoIDMap = "no idmapped mounts in a user namespace: the worker is not root"
	case hc.View:
		var nsErr error
		if userns, nsErr = idmapUserNS(); nsErr != nil {
			hc.NoIDMap = nsErr.Error()
		}
		hc.IDMap = userns != nil
	}
	cmd := s.helperCmd(hc, theirs)
	if userns != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, userns) // idmapFD
	}
	if err := s.fault("exec"); err != nil {
		return fmt.Errorf("start slot helper: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start slot helper: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }() // the one goroutine that waits for it
	undo = append(undo, func() { _ = cmd.Process.Kill(); <-done })
	conn, err := s.fileConn("control-conn", ours)
	if err != nil {
		return err
	}
	undo = append(undo, func() { conn.Close() })
	var fds []int
	if s.cfg.Cgroup != nil {
		for _, f := range s.cfg.Cgroup.Join() {
			fds = append(fds, int(f.Fd()))
		}
		hc.Cgroups, hc.CgroupThread = len(fds), s.cfg.Cgroup.ThreadJoin()
	}
	var egressEnd *net.UnixConn
	if s.cfg.Egress != nil {
		// The helper hands the connections steps make to its proxy port
		// over this pair, one descriptor a message.
		ourEnd, helperEnd, err := s.socketPair("egress-pair", "egress")
		if err != nil {
			return err
		}
		defer helperEnd.Close()
		if egressEnd, err = s.fileConn("egress-conn", ourEnd); err != nil {
			return err
		}
		undo = append(undo, func() { egressEnd.Close() })
		fds = append(fds, int(helperEnd.Fd()))
	}
	if err := s.fault("send"); err != nil {
		return fmt.Errorf("slot helper did not start: %w", err)
	}
	if err := writeMsg(conn, hc, fds); err != nil {
		return fmt.Errorf("slot helper did not start: %w", err)
	}
	var h hello
	if err := s.fault("hello"); err != nil {
		return fmt.Errorf("slot helper did not start: %w", err)
	}
	if _, err := readMsg(conn, &h); err != nil {
		return fmt.Errorf("slot helper did not start: %w", err)
	}
	if err := s.fault("helper-error"); err != nil {
		h.Error = err.Error()
	}
	if h.Error != "" {
		return fmt.Errorf("slot helper: %s", h.Error)
	}
	if egressEnd != nil {
		go serveEgress(egressEnd, s.cfg.Egress) // ends when the helper does
	}
	s.cmd, s.conn, s.done, s.status = cmd, conn, done, h.Status
	return nil
}

// socketPair makes a connected pair of unix stream sockets, both
// close-on-exec, each an *os.File named name.
func (s *Slot) socketPair(step, name string) (*os.File, *os.File, error) {
	if err := s.fault(step); err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	return os.NewFile(uintptr(pair[0]), name), os.NewFile(uintptr(pair[1]), name), nil
}

// fileConn turns f, which it closes, into a unix connection of its own.
func (s *Slot) fileConn(step string, f *os.File) (*net.UnixConn, error) {
	defer f.Close()
	if err := s.fault(step); err != nil {
		return nil, err
	}
	c, err := net.FileConn(f)
	if err != nil {
		return nil, err
	}
	return c.(*net.UnixConn), nil
}

// helperCmd is the command of a helper that gets its control socket as
// descriptor 3, in the namespaces hc asks for.
func (s *Slot) helperCmd(hc helperConfig, control *os.File) *exec.Cmd {
	cmd := exec.Command("/proc/self/exe", helperArg)
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{control}
	cmd.Stderr = s.cfg.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if s.cfg.Namespaces {
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS
		if hc.NetNS {
			cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWNET
		}
		if hc.UserNS {
			// The worker's uid is the only one mapped, as root of the
			// namespace: the helper owns its namespaces; the steps run
			// as that uid with every capability dropped.
			cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
			cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
			cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
			cmd.SysProcAttr.GidMappingsEnableSetgroups = false
		}
	}
	return cmd
}

// startFault, set by tests only, makes Slot.start fail at a named step.
var startFault func(s *Slot, step string) error

func (s *Slot) fault(step string) error {
	if startFault == nil {
		return nil
	}
	return startFault(s, step)
}
