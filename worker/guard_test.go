//go:build linux

package worker

import (
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"
)

// The servers the guard refuses: a single client's address, the nodes
// redisconn found, and a cluster's bus ports.
func TestRedisNodes(t *testing.T) {
	single := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer single.Close()
	unix := redis.NewClient(&redis.Options{Network: "unix", Addr: "/run/redis.sock"})
	defer unix.Close()
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"10.0.0.5:7000"}})
	defer cluster.Close()
	for _, tt := range []struct {
		name  string
		rdb   redis.UniversalClient
		nodes []string
		want  []string
	}{
		{"single", single, []string{"127.0.0.1:26379"}, []string{"127.0.0.1:6379", "127.0.0.1:26379"}},
		{"unix socket", unix, nil, nil},
		{"cluster", cluster, []string{"10.0.0.5:7000", "[fd00::5]:7001", "redis-0.svc:60000"},
			[]string{"10.0.0.5:7000", "[fd00::5]:7001", "redis-0.svc:60000", "10.0.0.5:17000", "[fd00::5]:17001"}},
	} {
		if got := redisNodes(tt.rdb, tt.nodes); !slices.Equal(got, tt.want) {
			t.Errorf("%s: redisNodes = %v, want %v", tt.name, got, tt.want)
		}
	}
}
