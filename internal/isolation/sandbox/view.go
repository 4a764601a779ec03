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

// ParseBinds parses the -ro-bind values and refuses a source that holds a
// unix socket at start. A socket made there later is refused to steps by
// the source's idmapped mount (hostsockets.go) or Landlock ABI 9, where
// the worker has them; the record's root tier says where it has not.
func ParseBinds(specs []string) ([]Bind, error) {
	var out []Bind
	for _, s := range specs {
		b, err := ParseBind(s)
		if err != nil {
			return nil, fmt.Errorf("-ro-bind %w", err)
		}
		if err := noSockets(b.Src); err != nil {
			return nil, fmt.Errorf("-ro-bind %s: %w", s, err)
		}
		out = append(out, b)
	}
	return out, nil
}

// maxBindEntries bounds the walk of a -ro-bind source at start.
const maxBindEntries = 200000

// noSockets walks root, without following symlinks, and fails on the
// first unix socket, or when root has more entries than it will check.
func noSockets(root string) error {
	// The tree a step would see: a source that is a symlink is bound as
	// what it links to.
	root, err := filepath.EvalSymlinks(root)
	if err != nil {
		return err
	}
	n := 0
	return filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if n++; n > maxBindEntries {
			return fmt.Errorf("more than %d entries: too many to check for unix sockets; bind a smaller tree", maxBindEntries)
		}
		if d.Type()&os.ModeSocket != 0 {
			return fmt.Errorf("%s is a unix socket: a step could connect to it", p)
		}
		return nil
	})
}

// systemDirs are bound read-only into every view when they exist; a symlink
// (merged /usr) is recreated as the same symlink.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// etcEntries are the entries of the host's /etc that programs need to
// start (the dynamic loader's cache, certificates, alternatives, time zone,
// the JVM's and Python's configuration, fonts, a browser's), bound read-only when they
// exist; a name ending in * is a glob. Never shadow, never a service's
// configuration. /etc/ssl/private, when it exists, is hidden.
var etcEntries = []string{
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ssl", "ca-certificates", "pki", "crypto-policies",
	"alternatives", "localtime", "timezone", "mime.types", "protocols", "services", "os-release",
	"debian_version", "fonts", "java-*", "python3*", "ImageMagick-*",
	// Debian's chromium: its first-run preferences, and what its wrapper
	// sources (beside the view's own files: browserOps)
	"chromium/master_preferences", "chromium.d/*",
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
	// IDMapFD is the user namespace the host's trees are idmapped with
	// (hostsockets.go), or -1 (0, stdin, for none too); NoIDMap then says
	// why there is none.
	IDMapFD int
	NoIDMap string
}

// tree is a detached copy of a host mount tree (open_tree), to attach in
// the view.
type tree struct {
	fd  int
	dir bool
}

// errSocket: a source is (or links to) a unix socket, which a step could
// connect to whatever the idmapping: never bound.
var errSocket = errors.New("a step could connect to it")

// cloneTree copies the mount tree at path (recursively, as a bind mount
// would) without attaching it anywhere, and applies attrs to every mount of
// the copy.
func cloneTree(path string, attrs uint64) (tree, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return tree{}, fmt.Errorf("open_tree %s: %w", path, err)
	}
	// What was cloned, not what path names now: open_tree follows a
	// symlink, and a path may change between a look and the clone.
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return tree{}, fmt.Errorf("fstat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFSOCK {
		unix.Close(fd)
		return tree{}, fmt.Errorf("%s is (or links to) a unix socket: %w", path, errSocket)
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

// opKind is what one operation of the view does.
type opKind int

const (
	opBind     opKind = iota // attach a copy of the host's src (copied up front) at dst, with attrs
	opMount                  // mount a filesystem of fstype at dst, with flags and data
	opMkdir                  // make the directory dst (and its parents), mode
	opSymlink                // make dst a symlink to data
	opWrite                  // write data to the file dst, mode
	opMask                   // hide dst when it exists: a directory under an empty read-only tmpfs, a file under /dev/null
	opReadOnly               // make the mount tree at dst read-only, no exec, when it exists
	opSetattr                // set attrs on the mount at dst
	opBindData               // bind a read-only file holding data over dst, the file unlinked at once
	opPivot                  // make the view the root of the mount namespace
)

// viewOp is one operation of the view, as data: buildView runs a list of
// them, in order, and stops at the first that fails. Paths (dst) are the
// view's: the operation acts below the view's base until opPivot.
type viewOp struct {
	kind     opKind
	src      string // opBind: host path; opMount: the source named in the mount table
	dst      string
	data     string // opWrite, opBindData: content; opSymlink: target; opMount: mount data
	fstype   string // opMount
	flags    uintptr
	attrs    uint64
	mode     os.FileMode
	optional bool   // opBind: skip an absent source, recreate a symlink as one; opWrite: a failure is ignored
	listed   bool   // opBind: named among the root tier's read-only trees when it is a tree
	hostTree bool   // opBind: a tree of the host's, idmapped when it can be (hostsockets.go)
	what     string // names the operation in an error (opBind: its copy's); else "view DST"
	// Set by copySources, before the root's tmpfs covers the base: the
	// copy to attach, or the symlink to recreate; neither for an absent
	// optional source.
	tree   *tree
	link   string
	isLink bool
	// idmapped: the tree is idmapped; else idmapErr says why not.
	idmapped bool
	idmapErr string
}

// viewOps is the whole view, as one list of operations: the root's tmpfs
// and /dev, the host's trees bound read-only, the workspace, the generated
// /etc, /dev's links, /proc and its masks, and the pivot. The host's
// system directories and /etc entries are looked up here (globs); nothing
// is changed.
func viewOps(c viewConfig) []viewOp {
	ops := []viewOp{
		{kind: opMount, src: "airlock", dst: "/", fstype: "tmpfs", data: "mode=0755,size=1m,nr_inodes=4096", flags: unix.MS_NOSUID | unix.MS_NODEV, what: "mount the root tmpfs"},
		// /dev first: the device trees are attached in it.
		{kind: opMkdir, dst: "/dev", mode: 0o755},
		{kind: opMount, src: "airlock-dev", dst: "/dev", fstype: "tmpfs", data: "mode=0755,size=64k,nr_inodes=64", flags: unix.MS_NOSUID | unix.MS_NOEXEC, what: "mount /dev"},
	}
	for _, d := range systemDirs {
		ops = append(ops, viewOp{kind: opBind, src: d, dst: d, attrs: roAttrs, optional: true, listed: true, hostTree: true})
	}
	for _, pat := range etcEntries {
		names := []string{filepath.Join("/etc", pat)}
		if strings.ContainsAny(pat, "*?[") {
			names, _ = filepath.Glob(names[0])
		}
		for _, n := range names {
			if strings.HasPrefix(n, "/etc/chromium.d/") && !hostChromiumSetting(n) {
				continue
			}
			ops = append(ops, viewOp{kind: opBind, src: n, dst: n, attrs: roAttrs, optional: true, hostTree: true})
		}
	}
	for _, d := range viewDevices {
		ops = append(ops, viewOp{kind: opBind, src: "/dev/" + d, dst: "/dev/" + d, attrs: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC, what: "/dev/" + d})
	}
	for _, b := range c.Binds {
		dst := b.Dst
		if dst == "" {
			dst = b.Src
		}
		ops = append(ops, viewOp{kind: opBind, src: b.Src, dst: dst, attrs: roAttrs, hostTree: true, what: "-ro-bind " + b.String()})
	}
	ops = append(ops, viewOp{kind: opBind, src: c.Workspace, dst: Workdir, attrs: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, what: "workspace"})

	// The generated /etc.
	user := fmt.Sprintf("airlock:x:%d:%d:Airlock step:%s:/bin/sh\n", c.UID, c.GID, Workdir)
	passwd, group := user, fmt.Sprintf("airlock:x:%d:\n", c.GID)
	if c.UID != 0 {
		passwd = "root:x:0:0:root:/root:/usr/sbin/nologin\n" + passwd
		group = "root:x:0:\n" + group
	}
	passwd += "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
	group += "nogroup:x:65534:\n"
	ops = append(ops,
		viewOp{kind: opMkdir, dst: "/etc", mode: 0o755},
		viewOp{kind: opWrite, dst: "/etc/passwd", data: passwd, mode: 0o644},
		viewOp{kind: opWrite, dst: "/etc/group", data: group, mode: 0o644},
		viewOp{kind: opWrite, dst: "/etc/hostname", data: hostname + "\n", mode: 0o644},
		viewOp{kind: opWrite, dst: "/etc/hosts", data: "127.0.0.1\tlocalhost " + hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n", mode: 0o644},
		viewOp{kind: opWrite, dst: "/etc/nsswitch.conf", data: "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n", mode: 0o644},
		// Host keys, if any, are only root's to read; hide them anyway.
		viewOp{kind: opMask, dst: "/etc/ssl/private"},
	)
	ops = append(ops, browserOps()...)
	for _, l := range viewLinks {
		ops = append(ops, viewOp{kind: opSymlink, dst: l[0], data: l[1]})
	}
	ops = append(ops,
		viewOp{kind: opSetattr, dst: "/dev", attrs: unix.MOUNT_ATTR_RDONLY, what: "read-only /dev"},
		// /proc of our PID namespace, mounted while the host's /proc is
		// still visible (a user namespace may mount proc only then).
		viewOp{kind: opMkdir, dst: "/proc", mode: 0o555},
		viewOp{kind: opMount, src: "proc", dst: "/proc", fstype: "proc", flags: unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, what: "mount /proc"},
		// SysV shared memory dies with the last process attached to it
		// (the sysctl belongs to our IPC namespace).
		viewOp{kind: opWrite, dst: "/proc/sys/kernel/shm_rmid_forced", data: "1\n", optional: true},
	)
	for _, name := range maskedProc {
		ops = append(ops, viewOp{kind: opMask, dst: "/proc/" + name, what: "mask /proc/" + name})
	}
	// The host's boot id, which would tell the steps of every slot and
	// task that they share a machine: a value of the slot's own instead
	// (read-only with /proc/sys below).
	ops = append(ops, viewOp{kind: opBindData, dst: "/proc/sys/kernel/random/boot_id", data: randomUUID() + "\n",
		what: "mask /proc/sys/kernel/random/boot_id"},
		// The host's load averages and its count of tasks, which tell a
		// step how busy the machine is: a constant.
		viewOp{kind: opBindData, dst: "/proc/loadavg", data: procLoadavg, what: "mask /proc/loadavg"})
	for _, name := range readonlyProc {
		ops = append(ops, viewOp{kind: opReadOnly, dst: "/proc/" + name, what: "read-only /proc/" + name})
	}
	return append(ops, viewOp{kind: opPivot, dst: "/"})
}

// procLoadavg is what a step reads in /proc/loadavg: no load, one task
// running of one, last pid 1.
const procLoadavg = "0.00 0.00 0.00 1/1 1\n"

// viewLinks are the view's symlinks: /dev's and /tmp.
var viewLinks = [][2]string{
	{"/dev/fd", "/proc/self/fd"}, {"/dev/stdin", "/proc/self/fd/0"}, {"/dev/stdout", "/proc/self/fd/1"},
	{"/dev/stderr", "/proc/self/fd/2"}, {"/dev/shm", Workdir + "/tmp"}, {"/tmp", Workdir + "/tmp"},
}

// buildView builds the view on a tmpfs mounted at c.Base and makes it the
// root of this mount namespace (pivot_root); the host's tree is detached.
// It must run with CAP_SYS_ADMIN in a mount namespace of our own whose
// mounts are private. It returns a description for the record. It runs in
// the helper, which exits on any error: the copies of host trees an error
// leaves unattached are descriptors (close-on-exec) that die with it.
func buildView(c viewConfig) (string, error) {
	ops := viewOps(c)
	if err := copySources(ops, c.IDMapFD); err != nil {
		return "", err
	}
	for i := range ops {
		if err := ops[i].run(c.Base); err != nil {
			if ops[i].what != "" && ops[i].kind != opBind {
				return "", fmt.Errorf("%s: %w", ops[i].what, err)
			}
			return "", fmt.Errorf("view %s: %w", ops[i].dst, err)
		}
	}
	var bound []string
	for _, op := range ops {
		if op.listed && op.tree != nil {
			bound = append(bound, op.dst)
		}
	}
	desc := "pivot_root: own tree (ro " + strings.Join(bound, " ") + "; generated /etc; /dev minimal; /proc masked; " + Workdir + ")"
	if len(c.Binds) > 0 {
		var bs []string
		for _, b := range c.Binds {
			bs = append(bs, b.String())
		}
		desc += "; -ro-bind " + strings.Join(bs, " ")
	}
	return desc + "; " + socketsTier(ops, c.NoIDMap), nil
}

// copySources copies the source of every opBind, while the host's tree is
// in place: the workspace lies below the base, which the root's tmpfs
// covers. With userns (a descriptor above 0), it idmaps the host's trees.
func copySources(ops []viewOp, userns int) error {
	for i := range ops {
		op := &ops[i]
		if op.kind != opBind {
			continue
		}
		err := op.copySource(userns)
		if err != nil && op.what != "" {
			err = fmt.Errorf("%s: %w", op.what, err)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (op *viewOp) copySource(userns int) error {
	fi, err := os.Lstat(op.src)
	if err != nil {
		if op.optional && errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	if fi.Mode()&os.ModeSocket != 0 && op.hostTree {
		// A socket bound by itself would be reachable whatever the
		// idmapping: none (checked at every helper start).
		if op.optional {
			return nil
		}
		return fmt.Errorf("%s is a unix socket: a step could connect to it", op.src)
	}
	if fi.Mode()&os.ModeSymlink != 0 && op.optional {
		if op.link, err = os.Readlink(op.src); err != nil {
			return err
		}
		op.isLink = true
		return nil
	}
	t, err := cloneTree(op.src, op.attrs)
	if errors.Is(err, errSocket) && op.optional {
		return nil // a system entry that links to a socket: left out
	}
	if err != nil {
		return err
	}
	op.tree = &t
	if t.dir && op.hostTree && userns > 0 {
		if err := t.idmap(userns); err != nil {
			op.idmapErr = err.Error()
		} else {
			op.idmapped = true
		}
	}
	return nil
}

// run carries the operation out below base.
func (op *viewOp) run(base string) error {
	p := base + op.dst
	switch op.kind {
	case opBind:
		switch {
		case op.isLink:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			return os.Symlink(op.link, p)
		case op.tree != nil:
			return op.tree.attach(p)
		}
		return nil // an optional source the host does not have
	case opMount:
		return unix.Mount(op.src, p, op.fstype, op.flags, op.data)
	case opMkdir:
		return os.MkdirAll(p, op.mode)
	case opSymlink:
		return os.Symlink(op.data, p)
	case opWrite:
		if err := os.WriteFile(p, []byte(op.data), op.mode); err != nil && !op.optional {
			return err
		}
		return nil
	case opMask:
		fi, err := os.Stat(p)
		if err != nil {
			return nil // nothing to hide
		}
		if fi.IsDir() {
			return emptyRO(p)
		}
		return unix.Mount(base+"/dev/null", p, "", unix.MS_BIND, "")
	case opReadOnly:
		if _, err := os.Lstat(p); err != nil {
			return nil
		}
		t, err := cloneTree(p, roAttrs|unix.MOUNT_ATTR_NOEXEC)
		if err != nil {
			return err
		}
		defer unix.Close(t.fd)
		return unix.MoveMount(t.fd, "", unix.AT_FDCWD, p, unix.MOVE_MOUNT_F_EMPTY_PATH)
	case opSetattr:
		return unix.MountSetattr(unix.AT_FDCWD, p, 0, &unix.MountAttr{Attr_set: op.attrs})
	case opBindData:
		// A file of the root's tmpfs, bound over dst and unlinked.
		f := base + "/.bind-data"
		if err := os.WriteFile(f, []byte(op.data), 0o444); err != nil {
			return err
		}
		err := unix.Mount(f, p, "", unix.MS_BIND, "")
		if err == nil {
			// Read-only: a step that owns the file (root of a user
			// namespace) could otherwise chmod and rewrite it.
			err = unix.MountSetattr(unix.AT_FDCWD, p, 0, &unix.MountAttr{Attr_set: roAttrs | unix.MOUNT_ATTR_NOEXEC})
		}
		if rmErr := os.Remove(f); err == nil {
			err = rmErr
		}
		return err
	case opPivot:
		return pivot(p)
	}
	return fmt.Errorf("unknown view operation %d", op.kind)
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
