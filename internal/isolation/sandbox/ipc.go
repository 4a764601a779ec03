//go:build linux

package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ipcSweeper removes the IPC objects steps left in the slot's IPC
// namespace: SysV shared memory, semaphore sets and message queues (listed
// in /proc/sysvipc, which shows the reader's IPC namespace) and POSIX
// message queues (the entries of a mqueue filesystem of the namespace,
// mounted detached, reachable only through its descriptor). It runs after
// every step, once the step's processes are dead, so that a step's IPC
// objects live exactly as long as its processes.
//
// A new IPC namespace per task would need a privileged helper, or a new
// helper per task (its start costs tens of milliseconds, see
// BenchmarkNewSlot); the sweep costs microseconds (BenchmarkIPCSweep).
type ipcSweeper struct {
	mq      int   // a detached mqueue mount of our IPC namespace
	mqEmpty int64 // the size of its root while it holds no queue
	buf     []byte
}

// newIPCSweeper mounts the namespace's mqueue filesystem, detached. It
// needs CAP_SYS_ADMIN over the IPC namespace: call it before dropping
// privileges.
func newIPCSweeper() (*ipcSweeper, error) {
	fs, err := unix.Fsopen("mqueue", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fsopen mqueue: %w", err)
	}
	defer unix.Close(fs)
	if err := unix.FsconfigCreate(fs); err != nil {
		return nil, fmt.Errorf("create mqueue: %w", err)
	}
	mnt, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fsmount mqueue: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(mnt, &st); err != nil { // the namespace is new: no queue yet
		unix.Close(mnt)
		return nil, fmt.Errorf("stat mqueue: %w", err)
	}
	return &ipcSweeper{mq: mnt, mqEmpty: st.Size, buf: make([]byte, 64<<10)}, nil
}

// sysvKinds are the SysV object tables and how to remove one of their ids.
var sysvKinds = []struct {
	file string
	rmid func(id int) error
}{
	{"/proc/sysvipc/shm", func(id int) error { _, err := unix.SysvShmCtl(id, unix.IPC_RMID, nil); return err }},
	{"/proc/sysvipc/sem", func(id int) error {
		_, _, e := unix.Syscall6(unix.SYS_SEMCTL, uintptr(id), 0, unix.IPC_RMID, 0, 0, 0)
		return errnoErr(e)
	}},
	{"/proc/sysvipc/msg", func(id int) error {
		_, _, e := unix.Syscall(unix.SYS_MSGCTL, uintptr(id), unix.IPC_RMID, 0)
		return errnoErr(e)
	}},
}

func errnoErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// empty reports, in four system calls, whether the namespace has no IPC
// object at all: the usual case, which then costs no /proc read.
func (s *ipcSweeper) empty() bool {
	var shm struct {
		usedIDs int32
		_       [5]uint64
	}
	if _, _, e := unix.Syscall(unix.SYS_SHMCTL, 0, shmInfo, uintptr(unsafe.Pointer(&shm))); e != 0 || shm.usedIDs != 0 {
		return false
	}
	var sem [10]int32 // struct seminfo; semusz (index 7): sets in use
	if _, _, e := unix.Syscall6(unix.SYS_SEMCTL, 0, 0, semInfo, uintptr(unsafe.Pointer(&sem)), 0, 0); e != 0 || sem[7] != 0 {
		return false
	}
	var msg [8]int32 // struct msginfo; msgpool (index 0): queues in use
	if _, _, e := unix.Syscall(unix.SYS_MSGCTL, 0, msgInfo, uintptr(unsafe.Pointer(&msg))); e != 0 || msg[0] != 0 {
		return false
	}
	var st unix.Stat_t // each queue adds to the size of the mqueue root
	return unix.Fstat(s.mq, &st) == nil && st.Size == s.mqEmpty
}

// SHM_INFO, SEM_INFO and MSG_INFO (linux/shm.h, linux/sem.h, linux/msg.h).
const (
	shmInfo = 14
	semInfo = 19
	msgInfo = 12
)

// sweep removes every IPC object of the namespace. It returns an error
// naming what it could not remove; the slot then replaces its helper, and
// the namespace with it.
func (s *ipcSweeper) sweep() error {
	if s.empty() {
		return nil
	}
	var errs []error
	for _, k := range sysvKinds {
		ids, err := s.sysvIDs(k.file)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, id := range ids {
			if err := k.rmid(id); err != nil && err != unix.EINVAL && err != unix.EIDRM {
				errs = append(errs, fmt.Errorf("remove %s id %d: %w", k.file, id, err))
			}
		}
	}
	names, err := s.mqNames()
	if err != nil {
		errs = append(errs, err)
	}
	for _, n := range names {
		if err := unix.Unlinkat(s.mq, n, 0); err != nil && err != unix.ENOENT {
			errs = append(errs, fmt.Errorf("remove POSIX queue %q: %w", n, err))
		}
	}
	return errors.Join(errs...)
}

// sysvIDs reads the ids (second column) of a /proc/sysvipc table.
func (s *ipcSweeper) sysvIDs(file string) ([]int, error) {
	fd, err := unix.Open(file, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ENOENT { // a kernel without SysV IPC
			return nil, nil
		}
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	defer unix.Close(fd)
	var data []byte
	for {
		n, err := unix.Read(fd, s.buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if n == 0 {
			break
		}
		data = append(data, s.buf[:n]...)
	}
	lines := bytes.Split(data, []byte("\n"))
	var ids []int
	for _, l := range lines[min(1, len(lines)):] { // the first line is the header
		f := bytes.Fields(l)
		if len(f) < 2 {
			continue
		}
		id, err := strconv.Atoi(string(f[1]))
		if err != nil {
			return nil, fmt.Errorf("%s: bad line %q", file, l)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// mqNames lists the POSIX message queues of the namespace.
func (s *ipcSweeper) mqNames() ([]string, error) {
	fd, err := unix.Openat(s.mq, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open mqueue: %w", err)
	}
	f := os.NewFile(uintptr(fd), "mqueue")
	defer f.Close()
	return f.Readdirnames(-1)
}
