//go:build linux

package sandbox

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// The view is the filesystem a step sees when its helper owns a mount
// namespace: a root of its own, built once per slot before any step runs,
// in the manner of bubblewrap and runc. It holds
//
//	/usr /bin /sbin /lib /lib64 ...  read-only binds of the host's (symlinks kept as symlinks)
//	/etc                             a generated passwd, group, hosts, hostname, nsswitch.conf,
//	                                 and read-only binds of what programs need to start (etcEntries)
//	/dev                             null zero full random urandom, fd stdin stdout stderr links,
//	                                 shm -> /workspace/tmp
//	/proc                            of the slot's PID namespace, with runc's masked and read-only paths
//	/workspace                       the slot's workspace: HOME and working directory of every step
//	/tmp                             -> /workspace/tmp
//	                                 plus the operator's -ro-bind directories
//
// and nothing else of the host: no /run, /var, /home, /root, host /tmp,
// store, worker binary, other slot or host socket. The root itself and /dev
// are read-only; only /workspace is writable.

// Workdir is where a step sees its workspace when its slot has a view.
const Workdir = "/workspace"

// Bind is a directory or file of the host that an operator adds, read-only,
// to every step's view.
type Bind struct {
	Src string `json:"src"` // host path, absolute
	Dst string `json:"dst"` // path in the view, absolute; Src when empty
}

func (b Bind) String() string {
	if b.Dst == "" || b.Dst == b.Src {
		return b.Src
	}
	return b.Src + ":" + b.Dst
}

// ParseBind parses "SRC[:DST]", the form of the worker's -ro-bind flag.
// Both paths must be absolute and clean; DST may not be /, nor lie in a
// part of the view Airlock builds itself (/workspace, /proc, /dev, /etc,
// /tmp).
func ParseBind(s string) (Bind, error) {
	src, dst, _ := strings.Cut(s, ":")
	if dst == "" {
		dst = src
	}
	for _, p := range []string{src, dst} {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return Bind{}, fmt.Errorf("%q: want SRC[:DST] with absolute, clean paths", s)
		}
	}
	if dst == "/" {
		return Bind{}, fmt.Errorf("%q: cannot bind over /", s)
	}
	for _, own := range []string{Workdir, "/proc", "/dev", "/etc", "/tmp"} {
		if dst == own || strings.HasPrefix(dst, own+"/") {
			return Bind{}, fmt.Errorf("%q: %s is built by Airlock; choose another destination", s, own)
		}
	}
	return Bind{Src: src, Dst: dst}, nil
}

// systemDirs are bound read-only into every view when they exist; a symlink
// (merged /usr) is recreated as the same symlink.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// etcEntries are the entries of the host's /etc that programs need to
// start (the dynamic loader's cache, certificates, alternatives, time zone,
// the JVM's and Python's configuration, fonts), bound read-only when they
// exist; a name ending in * is a glob. Never shadow, never a service's
// configuration. /etc/ssl/private, when it exists, is hidden.
var etcEntries = []string{
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ssl", "ca-certificates", "pki", "crypto-policies",
	"alternatives", "localtime", "timezone", "mime.types", "protocols", "services", "os-release",
	"debian_version", "fonts", "java-*", "python3*", "ImageMagick-*",
}

// viewDevices are the device nodes a step gets, bound from the host's.
var viewDevices = []string{"null", "zero", "full", "random", "urandom"}

// maskedProc (runc's and Docker's defaults) are hidden: a file under
// /dev/null, a directory under an empty read-only tmpfs.
var maskedProc = []string{"acpi", "asound", "interrupts", "kcore", "keys", "latency_stats",
	"timer_list", "timer_stats", "sched_debug", "scsi",
	// beyond runc's: the host's uids that hold keys, the kernel's build
	// configuration and symbol table; the host's boot command line (its
	// boot loader's paths, console, what init was told); its block
	// devices, their activity, its swap files
	"key-users", "config.gz", "kallsyms", "cmdline", "partitions", "diskstats", "swaps"}

// readonlyProc (runc's and Docker's defaults) are made read-only.
var readonlyProc = []string{"bus", "fs", "irq", "sys", "sysrq-trigger"}

// viewConfig is what buildView needs.
type viewConfig struct {
	Workspace string // host path of the slot's workspace
	Base      string // a directory of the worker's to mount the new root on (in our namespace only)
	UID, GID  int    // the steps' identity inside the namespace, for passwd
	Binds     []Bind
}

// tree is a detached copy of a host mount tree (open_tree), to attach in
// the view.
type tree struct {
	fd  int
	dir bool
}

// cloneTree copies the mount tree at path (recursively, as a bind mount
// would) without attaching it anywhere, and applies attrs to every mount of
// the copy.
func cloneTree(path string, attrs uint64) (tree, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return tree{}, err
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return tree{}, fmt.Errorf("open_tree %s: %w", path, err)
	}
	if attrs != 0 {
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: attrs}); err != nil {
			unix.Close(fd)
			return tree{}, fmt.Errorf("mount_setattr %s: %w", path, err)
		}
	}
	return tree{fd: fd, dir: st.Mode&unix.S_IFMT == unix.S_IFDIR}, nil
}

// attach mounts t at dst, creating dst (a directory or an empty file, as
// t is) and its parents first.
func (t tree) attach(dst string) error {
	defer unix.Close(t.fd)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if t.dir {
		if err := os.Mkdir(dst, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	} else if err := os.WriteFile(dst, nil, 0o644); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := unix.MoveMount(t.fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount to %s: %w", dst, err)
	}
	return nil
}

const roAttrs = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV

// pending is a host entry to place in the view: a tree to attach, or a
// symlink to recreate.
type pending struct {
	dst    string
	tree   tree
	link   string // symlink target when the host entry is a symlink
	isLink bool
}

// buildView builds the view on a tmpfs mounted at c.Base and makes it the
// root of this mount namespace (pivot_root); the host's tree is detached.
// It must run with CAP_SYS_ADMIN in a mount namespace of our own whose
// mounts are private. It returns a description for the record.
func buildView(c viewConfig) (string, error) {
	var todo []pending
	closeAll := func() {
		for _, p := range todo {
			if !p.isLink {
				unix.Close(p.tree.fd)
			}
		}
	}
	// Copy every source first, while the host's tree is in place (the
	// workspace lies below Base, which the new root will cover).
	add := func(src, dst string, attrs uint64, optional bool) error {
		fi, err := os.Lstat(src)
		if err != nil {
			if optional && errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 && optional {
			target, err := os.Readlink(src)
			if err != nil {
				return err
			}
			todo = append(todo, pending{dst: dst, link: target, isLink: true})
			return nil
		}
		t, err := cloneTree(src, attrs)
		if err != nil {
			return err
		}
		todo = append(todo, pending{dst: dst, tree: t})
		return nil
	}
	var bound []string
	for _, d := range systemDirs {
		if err := add(d, d, roAttrs, true); err != nil {
			closeAll()
			return "", err
		}
	}
	for _, p := range todo {
		if !p.isLink {
			bound = append(bound, p.dst)
		}
	}
	for _, pat := range etcEntries {
		names := []string{filepath.Join("/etc", pat)}
		if strings.ContainsAny(pat, "*?[") {
			names, _ = filepath.Glob(names[0])
		}
		for _, n := range names {
			if err := add(n, n, roAttrs, true); err != nil {
				closeAll()
				return "", err
			}
		}
	}
	for _, d := range viewDevices {
		if err := add("/dev/"+d, "/dev/"+d, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC, false); err != nil {
			closeAll()
			return "", fmt.Errorf("/dev/%s: %w", d, err)
		}
	}
	for _, b := range c.Binds {
		dst := b.Dst
		if dst == "" {
			dst = b.Src
		}
		if err := add(b.Src, dst, roAttrs, false); err != nil {
			closeAll()
			return "", fmt.Errorf("-ro-bind %s: %w", b, err)
		}
	}
	if err := add(c.Workspace, Workdir, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, false); err != nil {
		closeAll()
		return "", fmt.Errorf("workspace: %w", err)
	}

	base := c.Base
	if err := unix.Mount("airlock", base, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m,nr_inodes=4096"); err != nil {
		closeAll()
		return "", fmt.Errorf("mount the root tmpfs: %w", err)
	}
	// /dev first: the device trees are attached in it.
	if err := os.Mkdir(base+"/dev", 0o755); err != nil {
		closeAll()
		return "", err
	}
	if err := unix.Mount("airlock-dev", base+"/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64"); err != nil {
		closeAll()
		return "", fmt.Errorf("mount /dev: %w", err)
	}
	for i, p := range todo {
		var err error
		if p.isLink {
			err = os.MkdirAll(filepath.Dir(base+p.dst), 0o755)
			if err == nil {
				err = os.Symlink(p.link, base+p.dst)
			}
		} else {
			err = p.tree.attach(base + p.dst)
		}
		if err != nil {
			todo = todo[i+1:]
			closeAll()
			return "", fmt.Errorf("view %s: %w", p.dst, err)
		}
	}
	todo = nil
	if err := finishView(base, c); err != nil {
		return "", err
	}
	if err := pivot(base); err != nil {
		return "", err
	}
	desc := "pivot_root: own tree (ro " + strings.Join(bound, " ") + "; generated /etc; /dev minimal; /proc masked; " + Workdir + ")"
	if len(c.Binds) > 0 {
		var bs []string
		for _, b := range c.Binds {
			bs = append(bs, b.String())
		}
		desc += "; -ro-bind " + strings.Join(bs, " ")
	}
	return desc, nil
}

// finishView writes the generated files, links and mounts of the view
// below base: /etc, /dev's links, /proc and its masks, /tmp.
func finishView(base string, c viewConfig) error {
	user := fmt.Sprintf("airlock:x:%d:%d:Airlock step:%s:/bin/sh\n", c.UID, c.GID, Workdir)
	passwd, group := user, fmt.Sprintf("airlock:x:%d:\n", c.GID)
	if c.UID != 0 {
		passwd = "root:x:0:0:root:/root:/usr/sbin/nologin\n" + passwd
		group = "root:x:0:\n" + group
	}
	passwd += "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
	group += "nogroup:x:65534:\n"
	files := map[string]string{
		"etc/passwd":        passwd,
		"etc/group":         group,
		"etc/hostname":      hostname + "\n",
		"etc/hosts":         "127.0.0.1\tlocalhost " + hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"etc/nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n",
	}
	if err := os.MkdirAll(base+"/etc", 0o755); err != nil {
		return err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(base, name), []byte(data), 0o644); err != nil {
			return err
		}
	}
	// Host keys, if any, are only root's to read; hide them anyway.
	if fi, err := os.Stat(base + "/etc/ssl/private"); err == nil && fi.IsDir() {
		if err := emptyRO(base + "/etc/ssl/private"); err != nil {
			return err
		}
	}
	links := map[string]string{
		"dev/fd": "/proc/self/fd", "dev/stdin": "/proc/self/fd/0", "dev/stdout": "/proc/self/fd/1",
		"dev/stderr": "/proc/self/fd/2", "dev/shm": Workdir + "/tmp", "tmp": Workdir + "/tmp",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(base, name)); err != nil {
			return err
		}
	}
	if err := unix.MountSetattr(unix.AT_FDCWD, base+"/dev", 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("read-only /dev: %w", err)
	}
	// /proc of our PID namespace, mounted while the host's /proc is still
	// visible (a user namespace may mount proc only then).
	proc := base + "/proc"
	if err := os.Mkdir(proc, 0o555); err != nil {
		return err
	}
	if err := unix.Mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	// SysV shared memory dies with the last process attached to it (the
	// sysctl belongs to our IPC namespace).
	_ = os.WriteFile(proc+"/sys/kernel/shm_rmid_forced", []byte("1\n"), 0)
	for _, name := range maskedProc {
		p := proc + "/" + name
		fi, err := os.Lstat(p)
		if err != nil {
			continue
		}
		if fi.IsDir() {
			err = emptyRO(p)
		} else {
			err = unix.Mount(base+"/dev/null", p, "", unix.MS_BIND, "")
		}
		if err != nil {
			return fmt.Errorf("mask /proc/%s: %w", name, err)
		}
	}
	// The host's boot id, which would tell the steps of every slot and
	// task that they share a machine: a value of the slot's own instead,
	// a file of the root tmpfs bound over it and unlinked (read-only with
	// /proc/sys below).
	id := base + "/.boot_id"
	if err := os.WriteFile(id, []byte(randomUUID()+"\n"), 0o444); err != nil {
		return err
	}
	err := unix.Mount(id, proc+"/sys/kernel/random/boot_id", "", unix.MS_BIND, "")
	if rmErr := os.Remove(id); err == nil {
		err = rmErr
	}
	if err != nil {
		return fmt.Errorf("mask /proc/sys/kernel/random/boot_id: %w", err)
	}
	for _, name := range readonlyProc {
		p := proc + "/" + name
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		t, err := cloneTree(p, roAttrs|unix.MOUNT_ATTR_NOEXEC)
		if err != nil {
			return fmt.Errorf("read-only /proc/%s: %w", name, err)
		}
		if err := unix.MoveMount(t.fd, "", unix.AT_FDCWD, p, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			unix.Close(t.fd)
			return fmt.Errorf("read-only /proc/%s: %w", name, err)
		}
		unix.Close(t.fd)
	}
	return nil
}

// randomUUID is a version 4 UUID, in boot_id's form.
func randomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on Linux
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// emptyRO mounts an empty read-only tmpfs over dir.
func emptyRO(dir string) error {
	return unix.Mount("airlock-mask", dir, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,nr_inodes=2,mode=0555")
}

// pivot makes base the root of our mount namespace, detaches the host's
// tree and makes the new root read-only.
func pivot(base string) error {
	if err := unix.Chdir(base); err != nil {
		return err
	}
	// pivot_root(".", "."): the old root is stacked under the new one and
	// detached at once, with nothing left to unmount by name.
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if err := unix.MountSetattr(unix.AT_FDCWD, "/", 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}); err != nil {
		return fmt.Errorf("read-only root: %w", err)
	}
	return nil
}

// hostname is the name steps see in their UTS namespace.
const hostname = "airlock"
