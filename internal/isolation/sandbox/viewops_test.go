//go:build linux

package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestViewOps checks the view's list of operations as data: the root's
// tmpfs first and the pivot last, every bind attached inside it and
// read-only but the workspace and the device nodes, every masked and
// read-only /proc path after /proc is mounted, the operator's binds in.
func TestViewOps(t *testing.T) {
	c := viewConfig{Workspace: "/srv/slot/ws", Base: "/srv/slot", UID: 200000, GID: 200000,
		Binds: []Bind{{Src: "/opt/tool"}, {Src: "/srv/venv", Dst: "/venv"}}}
	ops := viewOps(c)
	if ops[0].kind != opMount || ops[0].dst != "/" || ops[len(ops)-1].kind != opPivot {
		t.Fatalf("first %+v, last %+v", ops[0], ops[len(ops)-1])
	}
	index := func(kind opKind, dst string) int {
		return slices.IndexFunc(ops, func(o viewOp) bool { return o.kind == kind && o.dst == dst })
	}
	devTmpfs, proc := index(opMount, "/dev"), index(opMount, "/proc")
	if devTmpfs < 0 || proc < 0 {
		t.Fatal("no /dev or /proc mount")
	}
	for i, o := range ops {
		if o.kind != opBind {
			continue
		}
		if i < devTmpfs || i > proc {
			t.Errorf("bind %s at %d, outside the root's tmpfs and /dev (%d) or after /proc (%d)", o.dst, i, devTmpfs, proc)
		}
		writable := o.attrs&unix.MOUNT_ATTR_RDONLY == 0
		if writable && o.dst != Workdir && !slices.Contains(viewDevices, strings.TrimPrefix(o.dst, "/dev/")) {
			t.Errorf("bind %s (from %s) is writable", o.dst, o.src)
		}
		if o.attrs&unix.MOUNT_ATTR_NOSUID == 0 {
			t.Errorf("bind %s allows setuid", o.dst)
		}
	}
	for _, name := range maskedProc {
		if i := index(opMask, "/proc/"+name); i < proc {
			t.Errorf("/proc/%s masked at %d, before /proc is mounted (%d)", name, i, proc)
		}
	}
	for _, name := range readonlyProc {
		if i := index(opReadOnly, "/proc/"+name); i < proc {
			t.Errorf("/proc/%s read-only at %d, before /proc is mounted (%d)", name, i, proc)
		}
	}
	for _, dst := range []string{"/proc/sys/kernel/random/boot_id", "/proc/loadavg"} {
		if i := index(opBindData, dst); i < proc {
			t.Errorf("%s not replaced after /proc is mounted", dst)
		}
	}
	if index(opBind, "/opt/tool") < 0 || index(opBind, "/venv") < 0 || index(opBind, Workdir) < 0 {
		t.Error("an operator's bind or the workspace is missing")
	}
	if index(opMask, "/etc/ssl/private") < 0 || index(opSetattr, "/dev") < 0 {
		t.Error("ssl/private not masked or /dev not read-only")
	}
}

// TestHostChromiumSetting: a host file of /etc/chromium.d goes into the
// view when it is a regular file sourced before the view's own.
func TestHostChromiumSetting(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "l")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	for n, want := range map[string]bool{
		"/etc/chromium.d/zzz-local": false, // after the view's own
		"/etc/chromium.d/zz-b":      false,
		chromiumFlagsFile:           false, // the view's own
		"/etc/chromium.d/no-such":   false,
		dir:                         false, // a tree
		link:                        false,
		file:                        true,
	} {
		if got := hostChromiumSetting(n); got != want {
			t.Errorf("hostChromiumSetting(%s) = %v, want %v", n, got, want)
		}
	}
}

// TestViewOpsBrowser: on a host with Debian's chromium, the view binds the
// wrapper's settings one by one and writes its own beside them, after
// them, with --no-sandbox and the proxy; never the host's managed
// policies.
func TestViewOpsBrowser(t *testing.T) {
	ops := viewOps(viewConfig{Workspace: "/srv/slot/ws", Base: "/srv/slot", UID: 200000, GID: 200000})
	own := slices.IndexFunc(ops, func(o viewOp) bool { return o.kind == opWrite && o.dst == chromiumFlagsFile })
	if _, err := os.Stat("/etc/chromium.d"); err != nil {
		if own >= 0 {
			t.Error("the view writes chromium's settings on a host without chromium")
		}
		t.Skip("no /etc/chromium.d on this host")
	}
	if own < 0 {
		t.Fatal("no /etc/chromium.d/zz-airlock in the view")
	}
	for i, o := range ops {
		if o.kind == opBind && strings.HasPrefix(o.dst, "/etc/chromium") {
			if i > own || o.dst == "/etc/chromium.d" || strings.HasPrefix(o.dst, "/etc/chromium/policies") {
				t.Errorf("bind %s at %d (the view's own file at %d): want the host's files one by one, before it, no policies", o.dst, i, own)
			}
		}
	}
	for _, want := range []string{`--no-sandbox --log-level=3"`, `if [ -n "$HTTPS_PROXY" ]`, `--proxy-server=$HTTPS_PROXY --proxy-bypass-list=<-loopback>`} {
		if !strings.Contains(ops[own].data, want) {
			t.Errorf("the view's chromium settings lack %q", want)
		}
	}
}
