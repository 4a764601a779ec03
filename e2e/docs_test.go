//go:build linux

package e2e

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/testkit/docrun"
)

// docsEnv turns TestDocsCommands on: 1 for every page, or the pages to
// run, comma-separated (README.md,docs/sessions.md). It is off in the test command: it
// runs the pages' servers on their fixed addresses (the API on
// 127.0.0.1:8080, the browser example's partner on 127.0.0.2:8766) and,
// as root, a worker without -dev on the Redis the pages name, which must
// not race with the other packages' tests; .ci/run runs it as root after
// them.
const docsEnv = "AIRLOCK_DOCS"

// TestDocsCommands runs every ```sh block of README.md and docs/*.md as a
// reader types it (package docrun), in page order, on the dev setup the
// page describes: in a copy of the checkout, with a home, a runtime
// directory and, as root, a /var/lib/airlock of its own (a private mount
// namespace), the Go caches of this user, no $REDIS_URL. A command that
// ends with another status than its page promises, or does not print what
// its page promises, fails the test; so does a page that leaves an
// untracked file in the checkout.
func TestDocsCommands(t *testing.T) {
	if os.Getenv(docsEnv) == "" {
		t.Skipf("%s=1 runs the pages' commands (.ci/run does, as root, after the tests)", docsEnv)
	}
	pages := []string{"README.md"}
	docs, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		pages = append(pages, strings.TrimPrefix(d, "../"))
	}
	if only := os.Getenv(docsEnv); only != "1" {
		// AIRLOCK_DOCS=README.md,docs/sessions.md runs those pages alone.
		pages = strings.Split(only, ",")
	}
	src := copyCheckout(t)
	env := docsEnviron(t)
	ran := 0
	for _, p := range pages {
		md, err := os.ReadFile(filepath.Join("..", p))
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := docrun.Parse(p, string(md))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			if b.Skip != "" {
				t.Logf("%s: not run: %s", b.Where(), b.Skip)
			}
		}
		segs := docrun.Segments(blocks)
		if len(segs) == 0 {
			continue
		}
		ran++
		t.Run(p, func(t *testing.T) {
			before := untracked(t, src)
			for _, seg := range segs {
				last := false
				if i := slices.IndexFunc(seg, func(b docrun.Block) bool { return b.Root }); i >= 0 && os.Geteuid() != 0 {
					t.Logf("%s and what follows need root: not run as uid %d", seg[i].Where(), os.Geteuid())
					seg, last = seg[:i], true
				}
				runSegment(t, src, env, seg)
				if t.Failed() || last {
					break
				}
			}
			if after := untracked(t, src); !slices.Equal(before, after) {
				t.Errorf("the page's commands left untracked files in the checkout: before %q, after %q", before, after)
			}
		})
	}
	if ran < min(3, len(pages)) {
		t.Fatalf("ran the blocks of %d pages: the pages lost their ```sh blocks", ran)
	}
}

// segmentTimeout bounds one segment of a page: a cold build of the
// checkout's copy, then its commands.
const segmentTimeout = 10 * time.Minute

// runSegment runs one segment of a page in a bash of its own, in a
// process group that is killed when it ends (what its blocks left
// running, such as a dev worker, goes with it).
func runSegment(t *testing.T, src string, env []string, seg []docrun.Block) {
	t.Helper()
	if len(seg) == 0 {
		return
	}
	out := t.TempDir()
	script := filepath.Join(out, "script.sh")
	if err := os.WriteFile(script, []byte(docrun.Script(seg)), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"bash", script, out}
	if os.Geteuid() == 0 {
		// A mount namespace with a /var/lib/airlock (the worker's store and
		// workspaces as root) of the run's own, and a PID namespace whose
		// init, once the script ends, asks what it left running to stop
		// (a dev worker, a daemonized redis-server that left the process
		// group), waits up to 10 s, and takes the rest with it: the kernel
		// kills every process of a namespace whose init exits, and
		// --kill-child kills that init when unshare dies (the test killed
		// at its timeout).
		if err := os.MkdirAll("/var/lib/airlock", 0o755); err != nil {
			t.Fatal(err)
		}
		args = append([]string{"unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child", "--mount-proc", "--",
			"sh", "-c", `mount -t tmpfs -o mode=0755 airlock-docs /var/lib/airlock || exit 1
"$@"; rc=$?
kill -TERM -1 2>/dev/null
i=0; while kill -0 -1 2>/dev/null && [ $i -lt 50 ]; do sleep 0.2; i=$((i + 1)); done
exit $rc`, "sh"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir, cmd.Env = src, env
	var shell bytes.Buffer
	cmd.Stdout, cmd.Stderr = &shell, &shell
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(segmentTimeout):
		err = fmt.Errorf("still running after %s", segmentTimeout)
	}
	stopGroup(cmd.Process.Pid, done)
	t.Logf("%s…: %d blocks in %s", seg[0].Where(), len(seg), time.Since(start).Round(time.Millisecond))
	if err == nil {
		return
	}
	failed, _ := os.ReadFile(filepath.Join(out, "failed"))
	f := strings.Fields(string(failed))
	if len(f) < 2 {
		t.Fatalf("%s: the script failed (%v) before a command did:\n%s", seg[0].Where(), err, shell.String())
	}
	n, _ := strconv.Atoi(f[0])
	b, c := docrun.Ref(seg, n)
	if c == nil {
		t.Fatalf("%s: failed %q", seg[0].Where(), failed)
	}
	got := tail(filepath.Join(out, f[0]+".out"), 6<<10)
	switch f[1] {
	case "exit":
		t.Errorf("%s:%d: exit %s, the page promises %d:\n%s\noutput:\n%s", b.Page, c.Line, f[2], c.Exit, c.Text, got)
	case "want":
		t.Errorf("%s:%d: the output lacks %q, which the page promises:\n%s\noutput:\n%s", b.Page, c.Line, c.Want, c.Text, got)
	case "background":
		why := map[string]string{"1": "it ended first", "2": fmt.Sprintf("not within %ds", docrun.BackgroundWait)}[f[2]]
		t.Errorf("%s: the block in the background never printed %q (%s):\n%s\noutput:\n%s", b.Where(), b.Background, why, c.Text, got)
	default:
		t.Errorf("%s: failed %q", b.Where(), failed)
	}
	if shell.Len() > 0 {
		t.Logf("bash said:\n%s", shell.String())
	}
}

// stopGroup ends process group pgid: SIGTERM (a dev worker removes its
// Redis URL file), then SIGKILL 10 seconds later.
func stopGroup(pgid int, done <-chan error) {
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if syscall.Kill(-pgid, 0) != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
}

// tail is the last n bytes of a file.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(io.LimitReader(f, n))
	return string(b)
}

// copyCheckout copies the checkout's files (tracked, and untracked ones
// git does not ignore: the change under test) into a directory of the
// test's, where the pages' commands write what they write.
func copyCheckout(t *testing.T) string {
	t.Helper()
	list, err := exec.Command("git", "-C", "..", "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	dst := filepath.Join(t.TempDir(), "airlock")
	n := 0
	for _, name := range strings.Split(strings.TrimRight(string(list), "\x00"), "\x00") {
		from := filepath.Join("..", name)
		st, err := os.Lstat(from)
		if err != nil {
			continue // deleted in the work tree
		}
		to := filepath.Join(dst, name)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		if st.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(from)
			if err == nil {
				err = os.Symlink(target, to)
			}
			if err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, st.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
		n++
	}
	t.Logf("copied %d files of the checkout to %s", n, dst)
	return dst
}

// untracked lists the files of the copy that the checkout's git neither
// tracks nor ignores. The copy has no .git of its own (go build would
// stamp it, and refresh the checkout's index with the copy's files):
// git reads the checkout's repository and a copy of its index.
func untracked(t *testing.T, src string) []string {
	t.Helper()
	dir, err := exec.Command("git", "-C", "..", "rev-parse", "--absolute-git-dir").Output()
	if err != nil {
		t.Fatal(err)
	}
	gitDir := strings.TrimSpace(string(dir))
	index, err := os.ReadFile(filepath.Join(gitDir, "index"))
	if err != nil {
		t.Fatal(err)
	}
	tmpIndex := filepath.Join(t.TempDir(), "index")
	if err := os.WriteFile(tmpIndex, index, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("git", "--git-dir", gitDir, "--work-tree", src, "ls-files", "--others", "--exclude-standard")
	cmd.Dir, cmd.Env = src, append(os.Environ(), "GIT_INDEX_FILE="+tmpIndex)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files in the copy: %v", err)
	}
	return strings.Fields(string(out))
}

// docsEnviron is the environment of the pages' shells: this process's (a
// reader's: their PATH, proxies, certificates), with a home and a runtime
// directory of the test's, this user's Go caches (a new home would
// otherwise build everything cold), and neither $REDIS_URL (it would win
// over a dev worker's URL file) nor the tests' own switches (AIRLOCK_*).
func docsEnviron(t *testing.T) []string {
	t.Helper()
	home, run := filepath.Join(t.TempDir(), "home"), filepath.Join(t.TempDir(), "run")
	for _, d := range []string{home, run} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "REDIS_URL", k == "HOME", k == "PWD", k == "OLDPWD", strings.HasPrefix(k, "AIRLOCK_"), strings.HasPrefix(k, "XDG_"), strings.HasPrefix(k, "GO"):
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "HOME="+home, "XDG_RUNTIME_DIR="+run, "TERM=dumb")
	keys := []string{"GOFLAGS", "GOTOOLCHAIN", "GOPROXY", "GOCACHE", "GOMODCACHE", "GOPATH"}
	out, err := exec.Command("go", append([]string{"env"}, keys...)...).Output() // one value a line, in order
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		if v != "" && i < len(keys) {
			env = append(env, keys[i]+"="+v)
		}
	}
	return env
}
