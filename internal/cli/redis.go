package cli

import (
	"flag"
	"fmt"
	"strings"
)

// DefaultPrefix is the default of -prefix: the workers' default key prefix
// (events.DefaultPrefix).
const DefaultPrefix = "airlock:"

// prefixUsage is the usage line of a client command's -prefix flag.
const prefixUsage = "prefix of Airlock's keys in Redis: the workers' -prefix"

// Redis holds the -redis and -prefix flags of a command that talks to the
// workers' Redis (enqueue, approve, api, mcp; the worker has its own).
type Redis struct {
	URL    string // -redis: DefaultRedis unless given
	Prefix string // -prefix: DefaultPrefix unless given
	from   string // where URL's default came from, for the usage line
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
	url, from := DefaultRedis()
	return &Redis{URL: url, Prefix: DefaultPrefix, from: from}
}

// Register registers -redis and -prefix on fs again, into r, with r's
// current values as defaults: for a command that parses the same flags
// before and after a subcommand (approve).
func (r *Redis) Register(fs *flag.FlagSet) {
	fs.StringVar(&r.URL, "redis", r.URL, RedisUsage(r.from))
	fs.StringVar(&r.Prefix, "prefix", r.Prefix, prefixUsage)
}

// CheckPrefix refuses a -prefix with a brace: Airlock puts its own hash
// tags ({...}) after it, for Redis Cluster.
func (r *Redis) CheckPrefix() error {
	if strings.ContainsAny(r.Prefix, "{}") {
		return fmt.Errorf("-prefix %q: must not hold a brace", r.Prefix)
	}
	return nil
}
