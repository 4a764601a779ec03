package contract_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/contract"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tmpfs"
)

// newWorkspace returns a real workspace in directory mode (no tmpfs, no
// root needed), removed at the end of the test.
func newWorkspace(t *testing.T) *tmpfs.Workspace {
	t.Helper()
	m, err := tmpfs.New(filepath.Join(t.TempDir(), "root"), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	slot, err := m.Slot("s0", os.Getuid(), os.Getgid())
	if err != nil {
		t.Fatal(err)
	}
	ws, err := slot.Create(64 << 20)
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// write writes files below the workspace, as a step would.
func write(t *testing.T, ws *tmpfs.Workspace, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(ws.Path(), name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func symlink(t *testing.T, ws *tmpfs.Workspace, target, name string) {
	t.Helper()
	if err := os.Symlink(target, filepath.Join(ws.Path(), name)); err != nil {
		t.Fatal(err)
	}
}

func mkfifo(t *testing.T, ws *tmpfs.Workspace, name string) {
	t.Helper()
	if err := syscall.Mkfifo(filepath.Join(ws.Path(), name), 0o600); err != nil {
		t.Fatal(err)
	}
}

// within fails the test if f does not return within 5 seconds (a read that
// blocks on a FIFO would hang).
func within[T any](t *testing.T, f func() (T, error)) (T, error) {
	t.Helper()
	type out struct {
		v   T
		err error
	}
	ch := make(chan out, 1)
	go func() {
		v, err := f()
		ch <- out{v, err}
	}()
	select {
	case o := <-ch:
		return o.v, o.err
	case <-time.After(5 * time.Second):
		t.Fatal("blocked for 5s")
		panic("unreachable")
	}
}

func TestReadResult(t *testing.T) {
	ws := newWorkspace(t)
	write(t, ws, map[string]string{
		"out/result.json": `{"amount": 1500}` + "\n",
		"out/scalar.json": `42`,
		"out/bad.json":    `{"amount": `,
		"out/two.json":    `{} {}`,
		"out/empty.json":  ``,
		"out/big.json":    `"` + strings.Repeat("x", 100) + `"`,
		"out/huge.json":   `"` + strings.Repeat("x", contract.DefaultMaxResult) + `"`,
		"out/dir/x":       `{}`,
	})
	symlink(t, ws, "/etc/passwd", "out/passwd.json")
	symlink(t, ws, "/etc", "out/etc")
	mkfifo(t, ws, "out/fifo.json")

	got, err := contract.ReadResult(ws, "out/result.json", 0)
	if err != nil || string(got) != `{"amount": 1500}`+"\n" {
		t.Errorf("ReadResult(out/result.json) = %q, %v; want the file as written", got, err)
	}
	if got, err := contract.ReadResult(ws, "out/scalar.json", 2); err != nil || string(got) != "42" {
		t.Errorf("ReadResult(out/scalar.json, 2) = %q, %v; want 42", got, err)
	}

	tests := []struct {
		rel  string
		max  int64
		want []error // each must match
	}{
		{"out/missing.json", 0, []error{contract.ErrNoResult, fs.ErrNotExist}},
		{"missing/result.json", 0, []error{contract.ErrNoResult}},
		{"out/passwd.json", 0, []error{tmpfs.ErrNotRegular}},
		{"out/etc/passwd", 0, []error{tmpfs.ErrSymlink}},
		{"out/fifo.json", 0, []error{tmpfs.ErrNotRegular}},
		{"out/dir", 0, []error{tmpfs.ErrNotRegular}},
		{"out/big.json", 50, []error{tmpfs.ErrTooLarge}},
		{"out/huge.json", 0, []error{tmpfs.ErrTooLarge}}, // above the 1 MiB default
		{"out/bad.json", 0, []error{contract.ErrResultNotJSON}},
		{"out/two.json", 0, []error{contract.ErrResultNotJSON}},
		{"out/empty.json", 0, []error{contract.ErrResultNotJSON}},
		{"../result.json", 0, []error{tmpfs.ErrBadPath}},
	}
	for _, tt := range tests {
		got, err := within(t, func() ([]byte, error) { return contract.ReadResult(ws, tt.rel, tt.max) })
		if got != nil {
			t.Errorf("ReadResult(%s) returned %q with error %v, want no content", tt.rel, got, err)
		}
		for _, want := range tt.want {
			if !errors.Is(err, want) {
				t.Errorf("ReadResult(%s) = %v, want an error matching %q", tt.rel, err, want)
			}
		}
		if err != nil && !strings.Contains(err.Error(), tt.rel) {
			t.Errorf("ReadResult(%s) = %q, want the error to name the file", tt.rel, err)
		}
		if err != nil && strings.Contains(err.Error(), "root:") {
			t.Errorf("ReadResult(%s) = %q: leaks the content of /etc/passwd", tt.rel, err)
		}
	}
}

func TestReadResultSymlinkTypeError(t *testing.T) {
	ws := newWorkspace(t)
	symlink(t, ws, "/etc/passwd", "result.json")
	_, err := contract.ReadResult(ws, "result.json", 0)
	var te *tmpfs.TypeError
	if !errors.As(err, &te) || te.Type != "symlink" {
		t.Errorf("ReadResult of a symlink = %v, want a *tmpfs.TypeError of type symlink", err)
	}
}

func TestReadResultThenValidate(t *testing.T) {
	ws := newWorkspace(t)
	write(t, ws, map[string]string{"out/result.json": `{"id": "inv-7", "amount": "12", "lines": []}`})
	doc, err := contract.ReadResult(ws, "out/result.json", 0)
	if err != nil {
		t.Fatal(err)
	}
	schema, err := contract.Compile([]byte(`{"type": "object", "properties": {"amount": {"type": "number"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := schema.Validate(doc)
	want := []contract.Violation{{Path: "/amount", Message: "Invalid type. Expected: number, given: string"}}
	if diff := cmp.Diff(want, got); err != nil || diff != "" {
		t.Errorf("Validate: %v; violations (-want +got):\n%s", err, diff)
	}
}

func sum(data string) string {
	s := sha256.Sum256([]byte(data))
	return hex.EncodeToString(s[:])
}

func TestCollectArtifacts(t *testing.T) {
	ws := newWorkspace(t)
	png := "\x89PNG\r\n\x1a\n" + strings.Repeat("\x00", 40)
	files := map[string]string{
		"out/report.csv":    "id,amount\n1,10\n2,20\n",
		"out/latin1.csv":    "caf\xe9\n",
		"out/data.json":     `{"rows": [1, 2, 3]}`,
		"out/broken.json":   `{"rows": [`,
		"out/chart.png":     png,
		"out/notes.txt":     "plain text\n",
		"out/blob.bin":      "\x00\x01\x02\x03",
		"out/sub/deep.csv":  "a\n",
		"out/sub/skip.txt":  "not matched\n",
		"in/input.csv":      "not an artifact\n",
		"tmp/scratch.json":  `{}`,
		"summary.json":      `[]`,
		"out/UPPER.JSON":    `{"ok": true}`,
		"out/empty.csv":     "",
		"out/sub/more/x.md": "# too deep for out/*/*.csv\n",
	}
	write(t, ws, files)
	symlink(t, ws, "/etc/passwd", "out/passwd.csv")
	symlink(t, ws, "report.csv", "out/alias.json")
	mkfifo(t, ws, "out/pipe.csv")
	if err := os.Mkdir(filepath.Join(ws.Path(), "out/dir.csv"), 0o700); err != nil {
		t.Fatal(err)
	}

	globs := []string{"out/*.csv", "out/*.json", "out/*.JSON", "out/*/*.csv", "out/chart.png", "out/*.txt", "out/*.bin", "*.json", "out/report.csv"}
	got, err := within(t, func() (*contract.Collected, error) { return contract.CollectArtifacts(ws, globs, contract.Limits{}) })
	if err != nil {
		t.Fatal(err)
	}
	art := func(name, ct string) record.Artifact {
		return record.Artifact{Name: name, Bytes: int64(len(files[name])), SHA256: sum(files[name]), ContentType: ct}
	}
	want := &contract.Collected{
		Artifacts: []record.Artifact{
			art("out/UPPER.JSON", "application/json"),
			art("out/blob.bin", "application/octet-stream"),
			art("out/broken.json", "text/plain; charset=utf-8"),
			art("out/chart.png", "image/png"),
			art("out/data.json", "application/json"),
			art("out/empty.csv", "text/csv; charset=utf-8"),
			art("out/latin1.csv", "text/plain; charset=utf-8"),
			art("out/notes.txt", "text/plain; charset=utf-8"),
			art("out/report.csv", "text/csv; charset=utf-8"),
			art("out/sub/deep.csv", "text/csv; charset=utf-8"),
			art("summary.json", "application/json"),
		},
		Data: map[string][]byte{},
		Refused: []record.File{
			{Path: "out/alias.json", Type: "symlink"},
			{Path: "out/passwd.csv", Type: "symlink"},
			{Path: "out/pipe.csv", Type: "fifo"},
		},
	}
	for _, a := range want.Artifacts {
		want.Data[a.Name] = []byte(files[a.Name])
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CollectArtifacts (-want +got):\n%s", diff)
	}
	var total int64
	for _, a := range got.Artifacts {
		total += int64(len(got.Data[a.Name]))
		if h := sha256.Sum256(got.Data[a.Name]); hex.EncodeToString(h[:]) != a.SHA256 || a.SHA256 != sum(files[a.Name]) {
			t.Errorf("%s: SHA256 %s does not match its content", a.Name, a.SHA256)
		}
	}
	if got.Bytes() != total {
		t.Errorf("Bytes() = %d, want %d", got.Bytes(), total)
	}
}

func TestCollectArtifactsNoMatch(t *testing.T) {
	ws := newWorkspace(t)
	write(t, ws, map[string]string{"out/a.txt": "a"})
	got, err := contract.CollectArtifacts(ws, []string{"out/*.csv", "reports/*.pdf"}, contract.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&contract.Collected{Data: map[string][]byte{}}, got); diff != "" {
		t.Errorf("CollectArtifacts (-want +got):\n%s", diff)
	}
	got, err = contract.CollectArtifacts(ws, nil, contract.Limits{})
	if err != nil || len(got.Artifacts) != 0 || len(got.Refused) != 0 {
		t.Errorf("CollectArtifacts(no glob) = %+v, %v; want nothing", got, err)
	}
}

func TestCollectArtifactsGlobDirectoryIsASymlink(t *testing.T) {
	ws := newWorkspace(t)
	symlink(t, ws, "/etc", "out/etc")
	mkfifo(t, ws, "out/queue")
	for _, tt := range []struct {
		glob string
		want record.File
	}{
		{"out/etc/*", record.File{Path: "out/etc", Type: "symlink"}},
		{"out/etc/ssl/*.pem", record.File{Path: "out/etc", Type: "symlink"}},
		{"out/queue/*", record.File{Path: "out/queue", Type: "fifo"}},
	} {
		got, err := within(t, func() (*contract.Collected, error) {
			return contract.CollectArtifacts(ws, []string{tt.glob}, contract.Limits{})
		})
		if err != nil {
			t.Fatalf("CollectArtifacts(%s): %v", tt.glob, err)
		}
		want := &contract.Collected{Data: map[string][]byte{}, Refused: []record.File{tt.want}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("CollectArtifacts(%s) (-want +got):\n%s", tt.glob, diff)
		}
	}
}

func TestCollectArtifactsCountCap(t *testing.T) {
	ws := newWorkspace(t)
	files := map[string]string{}
	for i := range 5 {
		files[fmt.Sprintf("out/%d.txt", i)] = "x"
	}
	write(t, ws, files)
	if got, err := contract.CollectArtifacts(ws, []string{"out/*"}, contract.Limits{MaxCount: 5}); err != nil || len(got.Artifacts) != 5 {
		t.Errorf("5 files, cap 5: %v, %v; want 5 artifacts", got, err)
	}
	_, err := contract.CollectArtifacts(ws, []string{"out/*"}, contract.Limits{MaxCount: 4})
	if !errors.Is(err, contract.ErrTooManyArtifacts) || !strings.Contains(err.Error(), "5 files") || !strings.Contains(err.Error(), "cap of 4") {
		t.Errorf("5 files, cap 4: %v; want ErrTooManyArtifacts naming 5 and 4", err)
	}

	// The default cap is 64.
	for i := 5; i < contract.DefaultMaxCount+1; i++ {
		files[fmt.Sprintf("out/%d.txt", i)] = "x"
	}
	write(t, ws, files)
	_, err = contract.CollectArtifacts(ws, []string{"out/*.txt"}, contract.Limits{})
	if !errors.Is(err, contract.ErrTooManyArtifacts) || !strings.Contains(err.Error(), "65 files") || !strings.Contains(err.Error(), "cap of 64") {
		t.Errorf("65 files, default cap: %v; want ErrTooManyArtifacts naming 65 and 64", err)
	}
}

func TestCollectArtifactsBytesCap(t *testing.T) {
	ws := newWorkspace(t)
	write(t, ws, map[string]string{
		"out/a.txt": strings.Repeat("a", 60),
		"out/b.txt": strings.Repeat("b", 60),
	})
	if got, err := contract.CollectArtifacts(ws, []string{"out/*"}, contract.Limits{MaxBytes: 120}); err != nil || got.Bytes() != 120 {
		t.Errorf("120 bytes, cap 120: %v, %v; want both files", got, err)
	}
	_, err := contract.CollectArtifacts(ws, []string{"out/*"}, contract.Limits{MaxBytes: 100})
	if !errors.Is(err, contract.ErrArtifactsTooLarge) || !strings.Contains(err.Error(), "120 bytes") || !strings.Contains(err.Error(), "cap of 100") {
		t.Errorf("120 bytes, cap 100: %v; want ErrArtifactsTooLarge naming 120 and 100", err)
	}
	// A sparse file counts for its size.
	f, err := os.Create(filepath.Join(ws.Path(), "out/sparse.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(contract.DefaultMaxBytes + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = contract.CollectArtifacts(ws, []string{"out/*.bin"}, contract.Limits{})
	if !errors.Is(err, contract.ErrArtifactsTooLarge) || !strings.Contains(err.Error(), fmt.Sprint(contract.DefaultMaxBytes)) {
		t.Errorf("a file above the default cap: %v; want ErrArtifactsTooLarge naming %d", err, contract.DefaultMaxBytes)
	}
}

func TestCheckGlob(t *testing.T) {
	for _, g := range []string{"out/*.csv", "out/report.csv", "*.json", "out/*/*.csv", "out/[a-c]?.txt"} {
		if err := contract.CheckGlob(g); err != nil {
			t.Errorf("CheckGlob(%q) = %v, want nil", g, err)
		}
	}
	for _, tt := range []struct{ glob, want string }{
		{"out/**/*.csv", `"**" is not supported`},
		{"**", `"**" is not supported`},
		{"/etc/*", "clean relative path"},
		{"../*.csv", "leaves the workspace"},
		{"out/../../x", "clean relative path"},
		{"out//a", "clean relative path"},
		{"", "clean relative path"},
		{"out/[", "syntax error in pattern"},
	} {
		err := contract.CheckGlob(tt.glob)
		if !errors.Is(err, contract.ErrBadGlob) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("CheckGlob(%q) = %v, want ErrBadGlob containing %q", tt.glob, err, tt.want)
		}
		ws := newWorkspace(t)
		if _, err := contract.CollectArtifacts(ws, []string{"out/*", tt.glob}, contract.Limits{}); !errors.Is(err, contract.ErrBadGlob) {
			t.Errorf("CollectArtifacts(%q) = %v, want ErrBadGlob", tt.glob, err)
		}
	}
}

func TestLimitsResolved(t *testing.T) {
	want := contract.Limits{MaxCount: 64, MaxBytes: 32 << 20, MaxResult: 1 << 20}
	if diff := cmp.Diff(want, contract.Limits{}.Resolved()); diff != "" {
		t.Errorf("Limits{}.Resolved() (-want +got):\n%s", diff)
	}
	set := contract.Limits{MaxCount: 3, MaxBytes: 4, MaxResult: 5}
	if diff := cmp.Diff(set, set.Resolved()); diff != "" {
		t.Errorf("Resolved of set limits (-want +got):\n%s", diff)
	}
}
