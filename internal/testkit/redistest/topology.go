package redistest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/internal/redis/redisconn"
)

// RequireTopologiesEnv, set to 1 (CI sets it), makes the topology helpers
// fail rather than skip when redis-server or redis-cli is missing.
const RequireTopologiesEnv = "AIRLOCK_REQUIRE_REDIS_TOPOLOGIES"

// ACLUser and ACLPassword are the user TLSACL's server knows; its default
// user is off.
const (
	ACLUser     = "airlock"
	ACLPassword = "airlock-acl-pw-1"
)

// ACLCommands are the commands Airlock needs, as an ACL rule list: what
// the worker, the client, enqueue and approve call (asynq's scripts
// included), measured with INFO commandstats over the whole flow. The
// "Managed Redis" of docs/redis.md lists the same.
var ACLCommands = []string{
	// connection: go-redis's handshake, health checks, cluster topology
	"+ping", "+hello", "+auth", "+info", "+client|setname", "+select",
	"+command", "+cluster|slots", "+cluster|shards", "+cluster|nodes", "+cluster|info",
	// asynq (most inside its Lua scripts) and Airlock's own keys
	"+eval", "+evalsha",
	"+get", "+getrange", "+set", "+setex", "+incr", "+del", "+exists", "+expire", "+expireat", "+pexpire", "+ttl", "+pttl",
	"+hset", "+hget", "+hgetall", "+hmget", "+hdel", "+hscan",
	"+lpush", "+rpush", "+lpop", "+blpop", "+lrange", "+llen", "+lrem", "+rpoplpush", "+lmove",
	"+sadd", "+srem", "+smembers", "+sismember", "+scard",
	"+zadd", "+zrem", "+zrange", "+zrangebyscore", "+zrevrange", "+zremrangebyscore", "+zcard", "+zscore",
	"+xadd", "+xread", "+xrange", "+xrevrange",
	"+subscribe", "+unsubscribe", "+publish",
	// asynq's queue statistics (metrics, asynqmon)
	"+memory|usage",
}

// need skips (or fails, under RequireTopologiesEnv) a test without the
// named programs.
func need(t testing.TB, progs ...string) map[string]string {
	t.Helper()
	paths := map[string]string{}
	for _, p := range progs {
		path, err := exec.LookPath(p)
		if err != nil {
			if os.Getenv(RequireTopologiesEnv) == "1" {
				t.Fatalf("%s is not installed and %s=1", p, RequireTopologiesEnv)
			}
			t.Skipf("%s is not installed (apt-get install redis-server redis-tools)", p)
		}
		paths[p] = path
	}
	return paths
}

// proc starts redis-server with the config text conf in dir and stops it
// when the test ends.
func proc(t testing.TB, dir, name, conf string, extra ...string) *exec.Cmd {
	t.Helper()
	path := filepath.Join(dir, name+".conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(need(t, "redis-server")["redis-server"], append([]string{path}, extra...)...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			if len(b) > 4096 {
				b = b[len(b)-4096:]
			}
			t.Logf("%s log (tail):\n%s", name, b)
		}
	})
	return cmd
}

// ports returns n free loopback ports p whose p+10000 (a cluster bus
// port) is free too.
func ports(t testing.TB, n int) []int {
	t.Helper()
	var out []int
	for tries := 0; len(out) < n && tries < 200; tries++ {
		p := 20000 + int(randUint(20000))
		if p+10000 > 65535 || !portFree(p) || !portFree(p+10000) {
			continue
		}
		dup := false
		for _, q := range out {
			dup = dup || q == p
		}
		if !dup {
			out = append(out, p)
		}
	}
	if len(out) < n {
		t.Fatal("no free ports")
	}
	return out
}

func randUint(n int64) int64 {
	v, err := rand.Int(rand.Reader, big.NewInt(n))
	if err != nil {
		panic(err)
	}
	return v.Int64()
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// waitURL waits until a client of url answers PING.
func waitURL(t testing.TB, url string) {
	t.Helper()
	rdb, _, err := redisconn.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer PING: %v", redisconn.Redact(url), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TLSACL starts a redis-server that speaks only TLS and requires a client
// certificate, whose default user is off and whose user ACLUser may run
// only ACLCommands, on keys and channels of any name. It returns the
// rediss:// URL with the CA, the client certificate and the user.
func TLSACL(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	pki := writePKI(t, dir)
	p := ports(t, 1)[0]
	conf := fmt.Sprintf(`bind 127.0.0.1
port 0
tls-port %d
tls-cert-file %s
tls-key-file %s
tls-ca-cert-file %s
tls-auth-clients yes
save ""
appendonly no
user default off
user %s on >%s ~* &* -@all %s
`, p, pki.serverCert, pki.serverKey, pki.ca, ACLUser, ACLPassword, strings.Join(ACLCommands, " "))
	proc(t, dir, "tls", conf)
	u := fmt.Sprintf("rediss://%s:%s@127.0.0.1:%d/0?tls_ca=%s&tls_cert=%s&tls_key=%s",
		ACLUser, ACLPassword, p, url.QueryEscape(pki.ca), url.QueryEscape(pki.clientCert), url.QueryEscape(pki.clientKey))
	waitURL(t, u)
	return u
}

// SentinelSet is a master, a replica and three sentinels watching them as
// "airlock-master".
type SentinelSet struct {
	URL        string // redis+sentinel://s1,s2,s3/airlock-master/0
	MasterAddr string
	Master     *exec.Cmd
}

// Sentinel starts a master, a replica of it and three sentinels.
func Sentinel(t testing.TB) *SentinelSet {
	t.Helper()
	dir := t.TempDir()
	ps := ports(t, 5)
	base := "bind 127.0.0.1\nsave \"\"\nappendonly no\n"
	m := proc(t, dir, "master", base+fmt.Sprintf("port %d\nrepl-diskless-sync-delay 0\n", ps[0]))
	proc(t, dir, "replica", base+fmt.Sprintf("port %d\nreplicaof 127.0.0.1 %d\n", ps[1], ps[0]))
	var addrs []string
	for i, p := range ps[2:] {
		conf := fmt.Sprintf(`bind 127.0.0.1
port %d
sentinel monitor airlock-master 127.0.0.1 %d 2
sentinel down-after-milliseconds airlock-master 2000
sentinel failover-timeout airlock-master 10000
`, p, ps[0])
		proc(t, dir, "sentinel"+strconv.Itoa(i), conf, "--sentinel")
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(p))
	}
	s := &SentinelSet{
		URL:        "redis+sentinel://" + strings.Join(addrs, ",") + "/airlock-master/0",
		MasterAddr: "127.0.0.1:" + strconv.Itoa(ps[0]),
		Master:     m,
	}
	waitURL(t, s.URL)
	// A failover needs the replica in sync and each sentinel to know the
	// others (they meet through the master's hello channel, every 2 s).
	deadline := time.Now().Add(30 * time.Second)
	for _, a := range addrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a})
		for {
			others, err1 := sc.Sentinels(context.Background(), "airlock-master").Result()
			reps, err2 := sc.Replicas(context.Background(), "airlock-master").Result()
			synced := err2 == nil && len(reps) == 1 && !strings.Contains(reps[0]["flags"], "disconnected") && reps[0]["master-link-status"] == "ok"
			if err1 == nil && len(others) == 2 && synced {
				break
			}
			if time.Now().After(deadline) {
				sc.Close()
				t.Fatalf("sentinel %s: knows %d other sentinels (%v), replicas %v (%v)", a, len(others), err1, reps, err2)
			}
			time.Sleep(100 * time.Millisecond)
		}
		sc.Close()
	}
	return s
}

// Cluster starts three masters with cluster mode on and joins them with
// redis-cli --cluster create; it returns the redis+cluster:// URL of the
// three once every node says cluster_state:ok.
func Cluster(t testing.TB) string {
	t.Helper()
	cli := need(t, "redis-server", "redis-cli")["redis-cli"]
	dir := t.TempDir()
	ps := ports(t, 3)
	var addrs []string
	for i, p := range ps {
		nd := filepath.Join(dir, strconv.Itoa(i))
		if err := os.Mkdir(nd, 0o700); err != nil {
			t.Fatal(err)
		}
		proc(t, nd, "node", fmt.Sprintf("bind 127.0.0.1\nport %d\ncluster-enabled yes\ncluster-config-file nodes.conf\ncluster-node-timeout 5000\nsave \"\"\nappendonly no\n", p))
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(p))
	}
	for _, a := range addrs {
		waitURL(t, "redis://"+a)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, a := range addrs {
		for {
			out, _ := exec.Command(cli, "-h", "127.0.0.1", "-p", strings.TrimPrefix(a, "127.0.0.1:"), "cluster", "info").Output()
			if strings.Contains(string(out), "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %s: cluster not ok:\n%s", a, out)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	u := "redis+cluster://" + strings.Join(addrs, ",")
	waitURL(t, u)
	return u
}

type pkiFiles struct{ ca, serverCert, serverKey, clientCert, clientKey string }

// writePKI writes a CA, a server certificate for 127.0.0.1 and localhost,
// and a client certificate, all signed by the CA.
func writePKI(t testing.TB, dir string) pkiFiles {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "airlock test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	f := pkiFiles{
		ca:         filepath.Join(dir, "ca.crt"),
		serverCert: filepath.Join(dir, "server.crt"), serverKey: filepath.Join(dir, "server.key"),
		clientCert: filepath.Join(dir, "client.crt"), clientKey: filepath.Join(dir, "client.key"),
	}
	writePEM(t, f.ca, "CERTIFICATE", caDER)
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, certPath, keyPath string) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kb, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, certPath, "CERTIFICATE", der)
		writePEM(t, keyPath, "EC PRIVATE KEY", kb)
	}
	leaf(2, "redis server", x509.ExtKeyUsageServerAuth, f.serverCert, f.serverKey)
	leaf(3, "airlock client", x509.ExtKeyUsageClientAuth, f.clientCert, f.clientKey)
	return f
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
}
