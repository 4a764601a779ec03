package redisconn

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/redis/go-redis/v9"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		url  string
		want Config
		tls  bool
	}{
		{url: "redis://127.0.0.1:6379/9", want: Config{Kind: Single, Addrs: []string{"127.0.0.1:6379"}, DB: 9}},
		{url: "redis://localhost", want: Config{Kind: Single, Addrs: []string{"localhost:6379"}}},
		{url: "redis://[::1]:7000/2", want: Config{Kind: Single, Addrs: []string{"[::1]:7000"}, DB: 2}},
		{url: "redis://:p%40ss@h:1/0", want: Config{Kind: Single, Addrs: []string{"h:1"}, Password: "p@ss"}},
		{url: "redis://app:s3cret@h:1/0", want: Config{Kind: Single, Addrs: []string{"h:1"}, Username: "app", Password: "s3cret"}},
		{url: "rediss://app:pw@redis.example.com:6380/1?tls_server_name=other", tls: true,
			want: Config{Kind: Single, Addrs: []string{"redis.example.com:6380"}, Username: "app", Password: "pw", DB: 1}},
		{url: "redis://h/0?dial_timeout=2s&read_timeout=3s&write_timeout=4s&pool_size=7&client_name=x",
			want: Config{Kind: Single, Addrs: []string{"h:6379"}, DialTimeout: 2e9, ReadTimeout: 3e9, WriteTimeout: 4e9, PoolSize: 7, ClientName: "x"}},
		{url: "redis+sentinel://s1:26379,s2,s3:26380/mymaster", want: Config{Kind: Sentinel, Addrs: []string{"s1:26379", "s2:26379", "s3:26380"}, MasterName: "mymaster"}},
		{url: "redis+sentinel://u:p@s1/mymaster/3?sentinel_user=su&sentinel_password=sp",
			want: Config{Kind: Sentinel, Addrs: []string{"s1:26379"}, MasterName: "mymaster", DB: 3, Username: "u", Password: "p", SentinelUsername: "su", SentinelPassword: "sp"}},
		{url: "rediss+sentinel://s1/m", tls: true, want: Config{Kind: Sentinel, Addrs: []string{"s1:26379"}, MasterName: "m"}},
		{url: "redis+cluster://a:7000,b:7001", want: Config{Kind: Cluster, Addrs: []string{"a:7000", "b:7001"}}},
		{url: "redis+cluster://u:p@a:7000/0", want: Config{Kind: Cluster, Addrs: []string{"a:7000"}, Username: "u", Password: "p"}},
		// HOST:PORT alone: redis://HOST:PORT/0.
		{url: "localhost:6379", want: Config{Kind: Single, Addrs: []string{"localhost:6379"}}},
		{url: "[::1]:7000", want: Config{Kind: Single, Addrs: []string{"[::1]:7000"}}},
	} {
		got, err := Parse(c.url)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.url, err)
			continue
		}
		if (got.TLS != nil) != c.tls {
			t.Errorf("Parse(%q): TLS %v, want %v", c.url, got.TLS != nil, c.tls)
		}
		if diff := cmp.Diff(c.want, *got, cmpopts.IgnoreUnexported(Config{}), cmpopts.IgnoreFields(Config{}, "TLS")); diff != "" {
			t.Errorf("Parse(%q) (-want +got):\n%s", c.url, diff)
		}
	}
}

func TestParseTLSServerName(t *testing.T) {
	c, err := Parse("rediss://h:1?tls_server_name=other.example")
	if err != nil {
		t.Fatal(err)
	}
	if c.TLS.ServerName != "other.example" || c.TLS.RootCAs != nil {
		t.Errorf("TLS config: server name %q, roots %v", c.TLS.ServerName, c.TLS.RootCAs)
	}
	c, err = Parse("rediss://h:1")
	if err != nil || c.TLS.ServerName != "h" {
		t.Errorf("default server name: %v %v", c, err)
	}
}

func TestParseErrors(t *testing.T) {
	for url, want := range map[string]string{
		"localhost":                             `"localhost" has no scheme: write redis://localhost (HOST:PORT alone is read as redis://HOST:PORT/0)`,
		"u:s3cret@h:1":                          "a Redis URL without a scheme: write redis://[user:password@]HOST:PORT/DB",
		"h:1/2":                                 `"h:1/2" has no scheme: write redis://h:1/2`,
		"http://h":                              `scheme "http"`,
		"redis://a:1,b:2":                       "names one server",
		"redis://h/x":                           `database "x"`,
		"redis://h/1/2":                         "only a database number",
		"redis://h:0":                           "bad port",
		"redis://h:99999":                       "bad port",
		"redis://::1":                           "bracket an IPv6",
		"redis://h?timeout=1s":                  `unknown option "timeout"`,
		"redis://h?dial_timeout=soon":           "dial_timeout",
		"redis://h?tls_ca=/x":                   "need a TLS scheme",
		"redis://h?sentinel_password=x":         "are for redis+sentinel",
		"redis+sentinel://s1":                   "master's name",
		"redis+cluster://a:1/3":                 "only database 0",
		"redis://a:1,,b":                        "an empty host",
		"rediss://h?tls_ca=/nonexistent/ca.pem": "tls_ca",
		"rediss://h?tls_cert=/x":                "go together",
		"redis://h#frag":                        "fragment",
	} {
		_, err := Parse(url)
		if err == nil || !errors.Is(err, ErrURL) || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an ErrURL saying %q", url, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Parse(%q): the error shows the password", url)
		}
	}
}

func TestParseErrorHidesPassword(t *testing.T) {
	_, err := Parse("redis://u:s3cret@a:1,,b")
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error %v shows the password", err)
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"redis://u:s3cret@h:1/0": "redis://u:xxxxx@h:1/0",
		"redis://:s3cret@h:1":    "redis://:xxxxx@h:1",
		"redis://h:1/0":          "redis://h:1/0",
		"redis+sentinel://u:s3cret@a,b/m?sentinel_password=s3cret": "redis+sentinel://u:xxxxx@a,b/m?sentinel_password=xxxxx",
		"nonsense":       "(a Redis URL without a scheme)",
		"localhost:6379": "redis://localhost:6379/0",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestClientKinds(t *testing.T) {
	for url, want := range map[string]string{
		"redis://h:1/0":           "*redis.Client",
		"redis+sentinel://s/m":    "*redis.Client",
		"redis+cluster://a:1,b:2": "*redis.ClusterClient",
	} {
		rdb, c, err := Open(url)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		switch rdb.(type) {
		case *redis.Client:
			got = "*redis.Client"
		case *redis.ClusterClient:
			got = "*redis.ClusterClient"
		}
		if got != want {
			t.Errorf("Open(%q) = %T, want %s", url, rdb, want)
		}
		if c.String() != Redact(url) {
			t.Errorf("String() = %q", c.String())
		}
		_ = rdb.Close()
	}
}

// TestParseHostPortShowsItsURL: HOST:PORT alone is said in logs and errors
// as the URL it is read as.
func TestParseHostPortShowsItsURL(t *testing.T) {
	c, err := Parse("localhost:6379")
	if err != nil || c.String() != "redis://localhost:6379/0" || c.DB != 0 {
		t.Errorf("Parse(localhost:6379): %v, %v", c, err)
	}
}
