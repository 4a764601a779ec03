// Package redisconn turns the one Redis URL that the worker, enqueue,
// approve, bench and the Go client accept into a go-redis client:
//
//	redis://[user:password@]host[:port][/db][?options]      one server
//	rediss://…                                             the same over TLS
//	redis+sentinel://[user:password@]host:port,host:port/master-name[/db][?options]
//	redis+cluster://[user:password@]host:port,host:port[?options]
//
// (rediss+sentinel:// and rediss+cluster:// are the TLS forms of the last
// two). The user and password are those of the data nodes (an ACL user);
// sentinels that require their own are given sentinel_user= and
// sentinel_password=. Options:
//
//	tls_ca=FILE            PEM CA bundle to verify the server with (else the system's)
//	tls_cert=FILE, tls_key=FILE   client certificate (mutual TLS)
//	tls_server_name=NAME   name to verify, when it is not the host's
//	dial_timeout=D, read_timeout=D, write_timeout=D   (Go durations)
//	pool_size=N, client_name=NAME
//
// Any other option is refused, naming it. The result is a
// redis.UniversalClient: *redis.Client for one server and for Sentinel
// (go-redis's failover client), *redis.ClusterClient for Cluster; asynq's
// NewClientFromRedisClient, NewServerFromRedisClient and
// NewInspectorFromRedisClient take each of them.
package redisconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Kind is the topology a URL names.
type Kind string

// Kinds of Redis deployment.
const (
	Single   Kind = "single"
	Sentinel Kind = "sentinel"
	Cluster  Kind = "cluster"
)

// Config is a parsed Redis URL.
type Config struct {
	Kind Kind
	// Addrs are the servers the URL names: one for Single, the sentinels
	// for Sentinel, the seed nodes for Cluster.
	Addrs []string
	// MasterName is Sentinel's name of the master set.
	MasterName         string
	Username, Password string
	// SentinelUsername and SentinelPassword authenticate to sentinels.
	SentinelUsername, SentinelPassword string
	DB                                 int
	// TLS is nil for a plain connection.
	TLS                                    *tls.Config
	DialTimeout, ReadTimeout, WriteTimeout time.Duration
	PoolSize                               int
	// MaxIdleConns bounds the idle connections the pool keeps (0: no
	// bound beyond PoolSize): a pool sized for bursts gives the rest back.
	MaxIdleConns int
	ClientName   string
	raw          string
}

// ErrURL is what every parse error matches.
var ErrURL = errors.New("bad Redis URL")

// urlError is a parse error with a hint of the accepted forms.
type urlError struct{ msg string }

func (e *urlError) Error() string {
	return e.msg + " (want redis://[user:password@]host:port/db, rediss://…, redis+sentinel://host:port,host:port/master[/db] or redis+cluster://host:port,host:port)"
}
func (e *urlError) Is(target error) bool { return target == ErrURL }

func errorf(format string, args ...any) error { return &urlError{msg: fmt.Sprintf(format, args...)} }

// Parse parses a Redis URL; it reads the TLS files it names. HOST:PORT
// alone (localhost:6379) is read as redis://HOST:PORT/0.
func Parse(raw string) (*Config, error) {
	if bareHostPort(raw) {
		raw = "redis://" + raw + "/0"
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		if strings.ContainsAny(raw, "@?") { // it may hold a password
			return nil, errorf("a Redis URL without a scheme: write redis://[user:password@]HOST:PORT/DB")
		}
		return nil, errorf("%q has no scheme: write redis://%s (HOST:PORT alone is read as redis://HOST:PORT/0)", raw, raw)
	}
	c := &Config{raw: raw}
	useTLS := false
	switch strings.ToLower(scheme) {
	case "redis":
		c.Kind = Single
	case "rediss":
		c.Kind, useTLS = Single, true
	case "redis+sentinel":
		c.Kind = Sentinel
	case "rediss+sentinel":
		c.Kind, useTLS = Sentinel, true
	case "redis+cluster":
		c.Kind = Cluster
	case "rediss+cluster":
		c.Kind, useTLS = Cluster, true
	default:
		return nil, errorf("scheme %q is not one of redis, rediss, redis+sentinel, redis+cluster", scheme)
	}
	rest, query, _ := strings.Cut(rest, "?")
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		return nil, errorf("a fragment (#) has no meaning in a Redis URL")
	}
	hostPart, path, _ := strings.Cut(rest, "/")
	if i := strings.LastIndexByte(hostPart, '@'); i >= 0 {
		user, pass, hasPass := strings.Cut(hostPart[:i], ":")
		var err error
		if c.Username, err = url.PathUnescape(user); err != nil {
			return nil, errorf("user: %v", err)
		}
		if hasPass {
			if c.Password, err = url.PathUnescape(pass); err != nil {
				return nil, errorf("password: bad escape")
			}
		}
		hostPart = hostPart[i+1:]
	}
	defPort := "6379"
	if c.Kind == Sentinel {
		defPort = "26379"
	}
	for _, h := range strings.Split(hostPart, ",") {
		if h == "" {
			return nil, errorf("an empty host in %q", Redact(raw))
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			// No port: host alone (an IPv6 address must be bracketed).
			host, port = strings.Trim(h, "[]"), defPort
			if strings.Contains(host, ":") && !strings.HasPrefix(h, "[") {
				return nil, errorf("host %q: bracket an IPv6 address ([::1]:6379)", h)
			}
		}
		if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
			return nil, errorf("host %q: bad port", h)
		}
		c.Addrs = append(c.Addrs, net.JoinHostPort(host, port))
	}
	if c.Kind == Single && len(c.Addrs) != 1 {
		return nil, errorf("%s:// names one server; for several use redis+sentinel:// or redis+cluster://", scheme)
	}
	segs := strings.FieldsFunc(path, func(r rune) bool { return r == '/' })
	dbSeg := ""
	switch c.Kind {
	case Sentinel:
		if len(segs) == 0 || len(segs) > 2 {
			return nil, errorf("redis+sentinel:// needs the master's name as its path: /master-name[/db]")
		}
		c.MasterName = segs[0]
		if len(segs) == 2 {
			dbSeg = segs[1]
		}
	case Cluster:
		if len(segs) > 0 && !(len(segs) == 1 && segs[0] == "0") {
			return nil, errorf("a Redis Cluster has only database 0")
		}
	default:
		if len(segs) > 1 {
			return nil, errorf("path %q: only a database number", path)
		}
		if len(segs) == 1 {
			dbSeg = segs[0]
		}
	}
	if dbSeg != "" {
		db, err := strconv.Atoi(dbSeg)
		if err != nil || db < 0 {
			return nil, errorf("database %q is not a number", dbSeg)
		}
		c.DB = db
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, errorf("options: %v", err)
	}
	var tlsOpt tlsFiles
	for k, vs := range q {
		v := vs[len(vs)-1]
		var err error
		switch k {
		case "tls_ca":
			tlsOpt.ca = v
		case "tls_cert":
			tlsOpt.cert = v
		case "tls_key":
			tlsOpt.key = v
		case "tls_server_name":
			tlsOpt.serverName = v
		case "sentinel_user":
			c.SentinelUsername = v
		case "sentinel_password":
			c.SentinelPassword = v
		case "dial_timeout":
			c.DialTimeout, err = time.ParseDuration(v)
		case "read_timeout":
			c.ReadTimeout, err = time.ParseDuration(v)
		case "write_timeout":
			c.WriteTimeout, err = time.ParseDuration(v)
		case "pool_size":
			c.PoolSize, err = strconv.Atoi(v)
		case "client_name":
			c.ClientName = v
		case "db":
			c.DB, err = strconv.Atoi(v)
		default:
			return nil, errorf("unknown option %q", k)
		}
		if err != nil {
			return nil, errorf("option %s=%q: %v", k, v, err)
		}
	}
	if (c.SentinelUsername != "" || c.SentinelPassword != "") && c.Kind != Sentinel {
		return nil, errorf("sentinel_user and sentinel_password are for redis+sentinel://")
	}
	if tlsOpt != (tlsFiles{}) && !useTLS {
		return nil, errorf("tls_* options need a TLS scheme (rediss://, rediss+sentinel://, rediss+cluster://)")
	}
	if useTLS {
		host, _, _ := net.SplitHostPort(c.Addrs[0])
		if c.TLS, err = tlsOpt.config(host); err != nil {
			return nil, err
		}
	}
	return c, nil
}

type tlsFiles struct{ ca, cert, key, serverName string }

func (t tlsFiles) config(host string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
	if t.serverName != "" {
		cfg.ServerName = t.serverName
	}
	if t.ca != "" {
		pem, err := os.ReadFile(t.ca)
		if err != nil {
			return nil, errorf("tls_ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errorf("tls_ca: %s holds no PEM certificate", t.ca)
		}
		cfg.RootCAs = pool
	}
	if (t.cert == "") != (t.key == "") {
		return nil, errorf("tls_cert and tls_key go together")
	}
	if t.cert != "" {
		kp, err := tls.LoadX509KeyPair(t.cert, t.key)
		if err != nil {
			return nil, errorf("tls_cert/tls_key: %v", err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	return cfg, nil
}

// Open parses raw and returns its client. It does not connect: the first
// command does.
func Open(raw string) (redis.UniversalClient, *Config, error) {
	c, err := Parse(raw)
	if err != nil {
		return nil, nil, err
	}
	return c.Client(), c, nil
}

// Client returns a new client of c: a sentinel-backed failover client, a
// cluster client (even from one seed address) or a single-node client, by
// its Kind.
func (c *Config) Client() redis.UniversalClient {
	o := &redis.UniversalOptions{
		Addrs:         c.Addrs,
		Username:      c.Username,
		Password:      c.Password,
		DB:            c.DB,
		TLSConfig:     c.TLS,
		DialTimeout:   c.DialTimeout,
		ReadTimeout:   c.ReadTimeout,
		WriteTimeout:  c.WriteTimeout,
		PoolSize:      c.PoolSize,
		MaxIdleConns:  c.MaxIdleConns,
		ClientName:    c.ClientName,
		IsClusterMode: c.Kind == Cluster,
	}
	switch c.Kind {
	case Sentinel:
		o.MasterName = c.MasterName
		o.SentinelUsername, o.SentinelPassword = c.SentinelUsername, c.SentinelPassword
		return redis.NewFailoverClient(o.Failover())
	case Cluster:
		return redis.NewClusterClient(o.Cluster())
	}
	return redis.NewClient(o.Simple())
}

// String is the URL with its passwords hidden, for logs and errors.
func (c *Config) String() string { return Redact(c.raw) }

// bareHostPort reports whether raw is HOST:PORT alone, with no scheme,
// user, path or option: what Parse reads as redis://HOST:PORT/0.
func bareHostPort(raw string) bool {
	if strings.ContainsAny(raw, "/@?#,") {
		return false
	}
	host, port, err := net.SplitHostPort(raw)
	if err != nil || host == "" {
		return false
	}
	p, err := strconv.ParseUint(port, 10, 16)
	return err == nil && p != 0
}

// Redact hides the password of a Redis URL (and sentinel_password).
// HOST:PORT alone is shown as the URL Parse reads it as.
func Redact(raw string) string {
	if bareHostPort(raw) {
		return "redis://" + raw + "/0"
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return "(a Redis URL without a scheme)"
	}
	rest, query, hasQuery := strings.Cut(rest, "?")
	hostPart, path, hasPath := strings.Cut(rest, "/")
	if i := strings.LastIndexByte(hostPart, '@'); i >= 0 {
		user, _, hasPass := strings.Cut(hostPart[:i], ":")
		if hasPass {
			user += ":xxxxx"
		}
		hostPart = user + "@" + hostPart[i+1:]
	}
	out := scheme + "://" + hostPart
	if hasPath {
		out += "/" + path
	}
	if hasQuery {
		if q, err := url.ParseQuery(query); err == nil {
			if q.Has("sentinel_password") {
				q.Set("sentinel_password", "xxxxx")
			}
			query = q.Encode()
		} else {
			query = "…"
		}
		out += "?" + query
	}
	return out
}

// Nodes returns the addresses of every server behind rdb that it can
// learn now: the URL's own, each cluster node, a sentinel's master and
// replicas. The worker refuses them to runs whatever an allow-list says.
func (c *Config) Nodes(ctx context.Context, rdb redis.UniversalClient) []string {
	seen := map[string]bool{}
	var out []string
	add := func(a string) {
		if a != "" && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for _, a := range c.Addrs {
		add(a)
	}
	switch c.Kind {
	case Cluster:
		if cc, ok := rdb.(*redis.ClusterClient); ok {
			if slots, err := cc.ClusterSlots(ctx).Result(); err == nil {
				for _, s := range slots {
					for _, n := range s.Nodes {
						add(n.Addr)
					}
				}
			}
		}
	case Sentinel:
		for _, sa := range c.Addrs {
			sc := redis.NewSentinelClient(&redis.Options{Addr: sa, Username: c.SentinelUsername, Password: c.SentinelPassword, TLSConfig: c.TLS, DialTimeout: 2 * time.Second})
			if m, err := sc.GetMasterAddrByName(ctx, c.MasterName).Result(); err == nil && len(m) == 2 {
				add(net.JoinHostPort(m[0], m[1]))
			}
			if rs, err := sc.Replicas(ctx, c.MasterName).Result(); err == nil {
				for _, r := range rs {
					add(net.JoinHostPort(r["ip"], r["port"]))
				}
			}
			_ = sc.Close()
		}
	}
	return out
}

// Durability says whether the servers behind rdb keep their data across a
// restart: "" when they do (AOF on, or RDB snapshots configured), a
// sentence saying what is off when they do not, and known=false when the
// server would not say (CONFIG is often refused by managed hosts).
func Durability(ctx context.Context, rdb redis.UniversalClient) (warning string, known bool) {
	check := func(c redis.Cmdable) (string, bool) {
		aof, err := c.ConfigGet(ctx, "appendonly").Result()
		if err != nil {
			return "", false
		}
		save, err := c.ConfigGet(ctx, "save").Result()
		if err != nil {
			return "", false
		}
		if aof["appendonly"] == "yes" || strings.TrimSpace(save["save"]) != "" {
			return "", true
		}
		return "Redis has neither AOF (appendonly) nor RDB snapshots (save) on: a restart loses queued tasks and pending approvals", true
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		var out string
		all := true
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			w, k := check(c)
			if !k {
				all = false
			} else if w != "" {
				out = w
			}
			return nil
		})
		return out, err == nil && (all || out != "")
	}
	return check(rdb)
}

// goRedisLogger adapts a function to go-redis's logger.
type goRedisLogger func(string)

func (f goRedisLogger) Printf(_ context.Context, format string, v ...any) {
	f(fmt.Sprintf(format, v...))
}

// SetLogger sends go-redis's own messages (failed dials, sentinel
// switches) to f instead of the standard logger on stderr. It is
// process-wide, for binaries.
func SetLogger(f func(msg string)) { redis.SetLogger(goRedisLogger(f)) }
