//go:build linux

package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-run/airlock"
)

// TestVersion: worker -version prints the one version string and exits 0.
func TestVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	code := exitCode(Run(context.Background(), []string{"-version"}, &out, &errOut), &errOut)
	if code != 0 || out.String() != airlock.Version+"\n" || errOut.Len() != 0 {
		t.Errorf("-version: exit %d, %q, %q", code, out.String(), errOut.String())
	}
}

// TestStoreLocation: a directory -store is announced absolute, whatever
// directory the worker runs in; an s3:// URL as it is; none at all (no
// default) is an error naming -store.
func TestStoreLocation(t *testing.T) {
	wd, _ := os.Getwd()
	for in, want := range map[string]string{
		"airlock-store":       filepath.Join(wd, "airlock-store"),
		"/var/lib/x/../store": "/var/lib/store",
		"s3://bucket/out":     "s3://bucket/out",
	} {
		if got, err := storeLocation(in); err != nil || got != want {
			t.Errorf("storeLocation(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := storeLocation(""); err == nil || !strings.HasPrefix(err.Error(), "-store: no default store") {
		t.Errorf("no store: %v", err)
	}
}

// TestRedisSource: what the worker's log lines and URL errors say of where
// -redis came from.
func TestRedisSource(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	for _, c := range []struct {
		dev, explicit    bool
		env, want, named string
	}{
		{false, false, "", "the default: no -redis or $REDIS_URL", "-redis"},
		{false, false, "redis://r:6379/0", "from $REDIS_URL", "$REDIS_URL"},
		{false, true, "redis://r:6379/0", "from -redis", "-redis"},
		{true, true, "", "-dev (the embedded Redis)", "-redis"},
	} {
		t.Setenv("REDIS_URL", c.env)
		src := redisSource(c.dev, c.explicit)
		if got := redisFromText(c.dev, src); got != c.want || src.Name() != c.named {
			t.Errorf("dev %v, -redis %v, $REDIS_URL %q: %q named %q, want %q named %q", c.dev, c.explicit, c.env, got, src.Name(), c.want, c.named)
		}
	}
}
