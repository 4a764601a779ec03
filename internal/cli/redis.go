package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/internal/redis/redisconn"
)

// DefaultPrefix is the default of -prefix: the workers' default key prefix
// (events.DefaultPrefix).
const DefaultPrefix = "airlock:"

// DefaultURL is the Redis a command uses when neither -redis, $REDIS_URL
// nor a dev-mode worker's URL file names one.
const DefaultURL = "redis://127.0.0.1:6379/0"

// prefixUsage is the usage line of a client command's -prefix flag.
const prefixUsage = "prefix of Airlock's keys in Redis: the workers' -prefix"

// Where a command's Redis URL came from (RedisSource.From).
const (
	FromFlag    = "-redis"
	FromEnv     = "$REDIS_URL"
	FromDevFile = "dev-file" // DevURLFile, written by worker -dev
	FromDefault = "default"  // DefaultURL
)

// RedisSource says where a command's Redis URL came from, for its usage
// line and its errors.
type RedisSource struct {
	// From is FromFlag, FromEnv, FromDevFile or FromDefault.
	From string
	// DevFile is the dev-mode URL file (DevURLFile) looked for: the one
	// read when From is FromDevFile. "" when none was looked for.
	DevFile string
	// DevErr says why DevFile exists but was not read (not the user's
	// own, writable by others, unreadable, empty). The default is then
	// refused (Redis.Check): the user meant the dev worker's Redis.
	DevErr error
}

// String says where the URL came from: "from -redis", "from $REDIS_URL",
// "from FILE, written by worker -dev", or "the default: no -redis,
// $REDIS_URL or dev-mode URL file FILE".
func (s RedisSource) String() string {
	switch s.From {
	case FromFlag, FromEnv:
		return "from " + s.From
	case FromDevFile:
		return "from " + s.DevFile + ", written by worker -dev"
	}
	if s.DevFile == "" {
		return "the default: no -redis or $REDIS_URL"
	}
	return "the default: no -redis, $REDIS_URL or dev-mode URL file " + s.DevFile
}

// Name is how a URL's error names where the URL came from: "-redis",
// "$REDIS_URL" or "-redis (from FILE)".
func (s RedisSource) Name() string {
	switch s.From {
	case FromEnv:
		return "$REDIS_URL"
	case FromDevFile:
		return "-redis (from " + s.DevFile + ")"
	}
	return "-redis"
}

// DefaultRedis is the Redis URL a command uses without -redis: $REDIS_URL,
// else the URL of a running dev-mode worker (DevURLFile), else
// DefaultURL. src says which, and, for the last, why a dev-mode URL file
// that exists was not read.
func DefaultRedis() (url string, src RedisSource) {
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u, RedisSource{From: FromEnv}
	}
	p := DevURLFile()
	src = RedisSource{From: FromDefault, DevFile: p}
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
		return DefaultURL, src
	}
	u, err := readDevURL(p)
	if err != nil {
		src.DevErr = err
		return DefaultURL, src
	}
	return u, RedisSource{From: FromDevFile, DevFile: p}
}

// maxDevURL bounds what is read of the dev-mode URL file.
const maxDevURL = 4096

// readDevURL reads the URL in the dev-mode URL file p, which it and its
// directory must be the user's own and writable by no one else.
func readDevURL(p string) (string, error) {
	if err := private(filepath.Dir(p)); err != nil {
		return "", err
	}
	if err := private(p); err != nil {
		return "", err
	}
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxDevURL+1))
	switch {
	case err != nil:
		return "", err
	case len(b) > maxDevURL:
		return "", fmt.Errorf("%s holds more than %d bytes", p, maxDevURL)
	}
	u := strings.TrimSpace(string(b))
	if u == "" {
		return "", fmt.Errorf("%s is empty", p)
	}
	return u, nil
}

// RedisUsage is the usage line of a -redis flag whose default came from
// src.
func RedisUsage(src RedisSource) string {
	const forms = "Redis `URL`: redis://, rediss://, redis+sentinel://, redis+cluster://, or HOST:PORT for redis://HOST:PORT/0 (docs/redis.md)"
	switch src.From {
	case FromEnv, FromDevFile:
		return forms + " (default " + src.String() + ")"
	}
	return forms
}

// Redis holds the -redis and -prefix flags of a command that talks to the
// workers' Redis (enqueue, approve, api, mcp, bench; the worker has its
// own), and where the URL came from.
type Redis struct {
	URL    string // -redis: DefaultRedis unless given
	Prefix string // -prefix: DefaultPrefix unless given
	src    RedisSource
}

// RedisFlags registers -redis (default DefaultRedis, usage RedisUsage) and
// -prefix (default DefaultPrefix) on fs and returns where they are parsed
// into.
func RedisFlags(fs *flag.FlagSet) *Redis {
	r := NewRedis()
	r.Register(fs)
	return r
}

// NewRedis is a Redis holding the defaults, for Register.
func NewRedis() *Redis {
	url, src := DefaultRedis()
	return &Redis{URL: url, Prefix: DefaultPrefix, src: src}
}

// Register registers -redis and -prefix on fs again, into r, with r's
// current values as defaults: for a command that parses the same flags
// before and after a subcommand (approve).
func (r *Redis) Register(fs *flag.FlagSet) {
	r.RegisterURL(fs, "")
	fs.StringVar(&r.Prefix, "prefix", r.Prefix, prefixUsage)
}

// RegisterURL registers -redis alone on fs, its usage line followed by
// more.
func (r *Redis) RegisterURL(fs *flag.FlagSet, more string) {
	fs.Var(&redisValue{r}, "redis", RedisUsage(r.src)+more)
}

// Source says where URL came from.
func (r *Redis) Source() RedisSource { return r.src }

// redisValue is the -redis flag: setting it makes the flag the URL's
// source.
type redisValue struct{ r *Redis }

// String is the URL.
func (v *redisValue) String() string {
	if v == nil || v.r == nil {
		return ""
	}
	return v.r.URL
}

// Set takes the URL -redis gives.
func (v *redisValue) Set(s string) error {
	v.r.URL, v.r.src = s, RedisSource{From: FromFlag}
	return nil
}

// CheckPrefix refuses a -prefix with a brace: Airlock puts its own hash
// tags ({...}) after it, for Redis Cluster.
func (r *Redis) CheckPrefix() error {
	if strings.ContainsAny(r.Prefix, "{}") {
		return fmt.Errorf("-prefix %q: must not hold a brace", r.Prefix)
	}
	return nil
}

// Check refuses the default Redis when a dev-mode URL file exists but
// could not be read: the user meant the dev worker's Redis, not whatever
// listens on 127.0.0.1:6379. The error names the file.
func (r *Redis) Check() error {
	if r.src.From != FromDefault || r.src.DevErr == nil {
		return nil
	}
	return fmt.Errorf("-redis: not using the default %s: the dev-mode URL file %s exists but cannot be used: %v (give -redis URL or set $REDIS_URL; remove the file if no worker -dev runs)",
		DefaultURL, r.src.DevFile, r.src.DevErr)
}

// Open checks the URL (Check) and returns its client (redisconn.Open); a
// bad URL is an error naming where it came from (-redis, $REDIS_URL, the
// dev-mode URL file).
func (r *Redis) Open() (redis.UniversalClient, *redisconn.Config, error) {
	if err := r.Check(); err != nil {
		return nil, nil, err
	}
	rdb, conf, err := redisconn.Open(r.URL)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", r.src.Name(), err)
	}
	return rdb, conf, nil
}

// Explain returns err, when it is an error reaching Redis (refused,
// unreachable, timed out, TLS, authentication), as a *RedisError that
// says which URL was used and where it came from, with a hint; any other
// error as it is.
func (r *Redis) Explain(err error) error {
	var re *RedisError
	if err == nil || errors.As(err, &re) || !redisconn.Unreachable(err) {
		return err
	}
	return &RedisError{URL: redisconn.Redact(r.URL), Source: r.src, Err: err}
}

// RedisError is an error reaching Redis, with the URL used and where it
// came from.
type RedisError struct {
	URL    string // passwords hidden
	Source RedisSource
	Err    error
}

// Error is "Redis URL (SOURCE): ERR", with a hint when the URL was the
// default (give one) or came from a dev-mode URL file whose worker is gone.
func (e *RedisError) Error() string {
	msg := fmt.Sprintf("Redis %s (%s): %v", e.URL, e.Source, e.Err)
	switch {
	case e.Source.From == FromDefault:
		msg += "; give -redis URL or set $REDIS_URL, or start worker -dev to try Airlock locally"
	case e.Source.From == FromDevFile && errors.Is(e.Err, syscall.ECONNREFUSED):
		msg += "; the worker -dev that wrote " + e.Source.DevFile + " is gone: start it again, or remove the file and give -redis URL or set $REDIS_URL"
	}
	return msg
}

// Unwrap returns the error reaching Redis.
func (e *RedisError) Unwrap() error { return e.Err }
