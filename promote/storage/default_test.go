package storage

import (
	"path/filepath"
	"testing"
)

// TestDefaultDir: the worker's default store is absolute: root's under
// /var/lib, a user's under $XDG_DATA_HOME when it is absolute, else under
// the home directory; unknown without either.
func TestDefaultDir(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_DATA_HOME", "/data")
	if got := defaultDirFor(0); got != "/var/lib/airlock/store" {
		t.Errorf("as root: %q", got)
	}
	for xdg, want := range map[string]string{
		"/data":    "/data/airlock/store",
		"relative": filepath.Join(home, ".local/share/airlock/store"), // ignored, as the XDG spec says
		"":         filepath.Join(home, ".local/share/airlock/store"),
	} {
		t.Setenv("XDG_DATA_HOME", xdg)
		if got := defaultDirFor(1000); got != want {
			t.Errorf("XDG_DATA_HOME=%q: %q, want %q", xdg, got, want)
		}
	}
	t.Setenv("XDG_DATA_HOME", "")
	t.Setenv("HOME", "")
	if got := defaultDirFor(1000); got != "" {
		t.Errorf("no home: %q", got)
	}
}

// TestWhere: where a store publishes a run's task, without opening it.
func TestWhere(t *testing.T) {
	for _, c := range []struct{ location, want string }{
		{"/srv/store", "/srv/store/r1/t1"},
		{"s3://bucket/out/", "s3://bucket/out/r1/t1/"},
		{"s3://bucket", "s3://bucket/r1/t1/"},
	} {
		if got, err := Where(c.location, "r1", "t1"); err != nil || got != c.want {
			t.Errorf("Where(%q) = %q, %v; want %q", c.location, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "ftp://x/y", "s3://Bad_Bucket/x"} {
		if _, err := Where(bad, "r1", "t1"); err == nil {
			t.Errorf("Where(%q): no error", bad)
		}
	}
	// Ids read from a record in Redis never lead out of the store.
	for _, ids := range [][2]string{{"../../etc", "t1"}, {"r1", "../x"}, {"a/b", "t1"}, {".", "t1"}, {"", "t1"}, {"r1", "..\\x"}} {
		if got, err := Where("/srv/store", ids[0], ids[1]); err == nil {
			t.Errorf("Where(/srv/store, %q, %q) = %q, want an error", ids[0], ids[1], got)
		}
	}
}
