//go:build linux

package sandbox

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/isolation/confine"
	"golang.org/x/sys/unix"
)

// lateSockets makes, in dir, a stream socket that writes secret to whoever
// connects and a datagram socket, both mode 0777; got receives what
// reaches either.
func lateSockets(t *testing.T, dir, secret string) (got chan string) {
	t.Helper()
	got = make(chan string, 4)
	ln, err := net.Listen("unix", filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte(secret + "\n"))
			c.Close()
			got <- "stream"
		}
	}()
	dg, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "d.sock"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dg.Close() })
	go func() {
		buf := make([]byte, 16)
		for {
			if _, _, err := dg.ReadFrom(buf); err != nil {
				return
			}
			got <- "datagram"
		}
	}()
	for _, s := range []string{"s.sock", "d.sock"} {
		if err := os.Chmod(filepath.Join(dir, s), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	return got
}

// TestLateSocketInBind: unix sockets the host makes in a -ro-bind source
// after the slot's helper started (stream and datagram, mode 0777, in a
// 0777 directory: the start-time check saw none) are refused to a step:
// connect and sendto fail with EACCES and nothing reaches them. The
// step's own socket in its workspace still works.
func TestLateSocketInBind(t *testing.T) {
	needView(t)
	src, err := os.MkdirTemp("", "airlock-late-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(src) })
	if err := os.Chmod(src, 0o777); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Binds = []Bind{{Src: probeDir(t), Dst: "/opt/probe"}, {Src: src, Dst: "/opt/late"}}
	if _, err := ParseBinds([]string{src + ":/opt/late"}); err != nil {
		t.Fatal(err) // no socket yet
	}
	s, err := NewSlot(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := lateSockets(t, src, "latesecret42")
	r, err := s.Run(context.Background(), step("/opt/probe/probe", "read=/opt/late/s.sock", "dgram=/opt/late/d.sock",
		"unix-self=/workspace/tmp/own.sock", "unix-self=/tmp/own2.sock"))
	if err != nil {
		t.Fatal(err)
	}
	want := "read:/opt/late/s.sock EACCES\ndgram=/opt/late/d.sock EACCES\nunix-self=/workspace/tmp/own.sock ok\nunix-self=/tmp/own2.sock ok\n"
	if out := string(r.Stdout.Data); out != want {
		t.Errorf("probe: %q, want %q\nroot tier: %s", out, want, s.Status().Root)
	}
	select {
	case what := <-got:
		t.Errorf("a %s from the step reached the host's socket", what)
	case <-time.After(100 * time.Millisecond):
	}
	if root := s.Status().Root; !strings.HasSuffix(root, "; host trees idmapped: their unix sockets refused") {
		t.Errorf("root tier %q does not say the host trees are idmapped", root)
	}
	// The host's files still read as before, through their "other" bits.
	r, err = s.Run(context.Background(), step("sh", "-c", "stat -c %U /usr/bin /opt/probe/probe; head -c4 /opt/probe/probe | od -c | head -1"))
	if err != nil || !strings.Contains(string(r.Stdout.Data), "nobody\nnobody\n") || !strings.Contains(string(r.Stdout.Data), "E   L   F") {
		t.Errorf("host files through the idmapped trees: %q %q, %v", r.Stdout.Data, r.Stderr.Data, err)
	}
}

// TestSocketSourceRefused: a -ro-bind source that is itself a unix socket
// when a helper starts (the host replaced a file with one since the
// worker started) is refused, and the helper does not start.
func TestSocketSourceRefused(t *testing.T) {
	needView(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	link := filepath.Join(dir, "link")
	if err := os.Symlink(sock, link); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{sock, link} {
		cfg := testConfig(t)
		cfg.Binds = []Bind{{Src: src, Dst: "/opt/s.sock"}}
		s, err := NewSlot(cfg)
		if err == nil {
			s.Close()
			t.Fatalf("a slot started with %s, a unix socket, bound into its view", src)
		}
		if !strings.Contains(err.Error(), "unix socket") {
			t.Errorf("%s: error %q", src, err)
		}
		if _, err := ParseBinds([]string{src + ":/opt/s.sock"}); err == nil || !strings.Contains(err.Error(), "unix socket") {
			t.Errorf("ParseBinds(%s): %v, want a refusal naming the socket", src, err)
		}
	}
}

// TestHandledFSResolveUnix: from Landlock ABI 9 a step's domain handles
// pathname unix sockets (granted on the workspace only, with every other
// right); below, it cannot.
func TestHandledFSResolveUnix(t *testing.T) {
	for abi, want := range map[int]bool{1: false, 6: false, 7: false, 8: false, 9: true, 10: true} {
		if got := confine.HandledFS(abi)&unix.LANDLOCK_ACCESS_FS_RESOLVE_UNIX != 0; got != want {
			t.Errorf("ABI %d handles RESOLVE_UNIX: %v, want %v", abi, got, want)
		}
	}
}

// TestSocketsTier: the root tier says where a socket the host makes stays
// reachable, and why, never that every tree is idmapped when one is not.
func TestSocketsTier(t *testing.T) {
	dir, file := &tree{dir: true}, &tree{}
	ops := []viewOp{
		{kind: opBind, dst: "/usr", hostTree: true, tree: dir, idmapped: true},
		{kind: opBind, dst: "/etc/ld.so.cache", hostTree: true, tree: file},
		{kind: opBind, dst: Workdir, tree: dir},
	}
	if got, want := socketsTier(ops, ""), "host trees idmapped: their unix sockets refused"; got != want {
		t.Errorf("all idmapped: %q, want %q", got, want)
	}
	ops = append(ops, viewOp{kind: opBind, dst: "/opt/img", hostTree: true, tree: dir, idmapErr: "its filesystem refused an idmapped mount: invalid argument"})
	if got, want := socketsTier(ops, ""), "unix sockets the host makes reachable in /opt/img (its filesystem refused an idmapped mount: invalid argument)"; got != want {
		t.Errorf("one refused: %q, want %q", got, want)
	}
	if got, want := socketsTier(ops, "no user namespace"), "unix sockets the host makes in its trees reachable (no user namespace)"; got != want {
		t.Errorf("no idmapping: %q, want %q", got, want)
	}
}
