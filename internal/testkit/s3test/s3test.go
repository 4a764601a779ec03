// Package s3test starts a real S3-compatible server for tests: moto's
// server mode (moto_server, or python3 -m moto.server), a process of its
// own on a free loopback port, which honours conditional writes
// (If-None-Match: *) from moto 5.
//
// Without moto the test is skipped, unless AIRLOCK_REQUIRE_S3=1 (as CI
// sets it): then it fails.
package s3test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/airlock-run/airlock/promote/s3store"
)

// RequireEnv is the variable that turns a missing moto into a failure.
const RequireEnv = "AIRLOCK_REQUIRE_S3"

// startTimeout bounds the wait for a started server to answer.
const startTimeout = 20 * time.Second

// Server is a running S3-compatible server.
type Server struct {
	// Endpoint is its URL: http://127.0.0.1:PORT.
	Endpoint string
}

// Credentials and region the tests use: moto takes any.
const (
	AccessKey = "airlock-test"
	SecretKey = "airlock-test-secret"
	Region    = "us-east-1"
)

// command finds moto's server: moto_server on $PATH, else python3 with
// the moto.server module.
func command() ([]string, error) {
	if p, err := exec.LookPath("moto_server"); err == nil {
		return []string{p}, nil
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		return nil, fmt.Errorf("no moto_server and no python3 on $PATH")
	}
	if out, err := exec.Command(py, "-c", "import moto.server").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("no moto_server on $PATH, and python3 cannot import moto.server: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return []string{py, "-m", "moto.server"}, nil
}

// Start starts moto's server for t, stopped when t ends. Without moto, t
// is skipped, or fails when $AIRLOCK_REQUIRE_S3 is 1.
func Start(t testing.TB) *Server {
	t.Helper()
	argv, err := command()
	if err != nil {
		msg := fmt.Sprintf("s3test: no S3 server: %v (install it: python3 -m pip install 'moto[server]')", err)
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("%s; %s=1 requires it", msg, RequireEnv)
		}
		t.Skip(msg)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ { // the free port may be taken before moto binds it
		s, err := try(t, argv)
		if err == nil {
			return s
		}
		lastErr = err
	}
	t.Fatalf("s3test: %v", lastErr)
	return nil
}

func try(t testing.TB, argv []string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	// The log goes to an unlinked file: no copying goroutine, and it is
	// read back only to explain a failed start.
	log, err := os.CreateTemp("", "s3test-*.log")
	if err != nil {
		return nil, err
	}
	_ = os.Remove(log.Name())
	defer log.Close()
	cmd := exec.Command(argv[0], append(argv[1:], "-H", "127.0.0.1", "-p", strconv.Itoa(port))...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop := func() {
		_ = cmd.Process.Kill()
		<-done
	}
	s := &Server{Endpoint: "http://127.0.0.1:" + strconv.Itoa(port)}
	if err := s.waitReady(done); err != nil {
		stop()
		b := make([]byte, 4096)
		n, _ := log.ReadAt(b, 0)
		return nil, fmt.Errorf("%s on port %d: %w; its output: %q", argv[0], port, err, b[:n])
	}
	t.Cleanup(stop)
	return s, nil
}

// waitReady polls the server until it answers an HTTP request, or exits.
func (s *Server) waitReady(exited <-chan struct{}) error {
	c := &http.Client{Timeout: time.Second}
	defer c.CloseIdleConnections()
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("exited at start")
		default:
		}
		resp, err := c.Get(s.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no answer after %s", startTimeout)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Env is the AWS environment that points a process at the server: the
// endpoint, region and credentials, and no instance metadata lookups.
func (s *Server) Env() []string {
	return []string{
		"AWS_ENDPOINT_URL_S3=" + s.Endpoint,
		"AWS_REGION=" + Region,
		"AWS_ACCESS_KEY_ID=" + AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + SecretKey,
		"AWS_EC2_METADATA_DISABLED=true",
	}
}

// Setenv sets Env in the test's process until t ends (t.Setenv: not in a
// parallel test).
func (s *Server) Setenv(t testing.TB) {
	t.Helper()
	for _, kv := range s.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// Client returns a client of the server, configured explicitly (not from
// the environment), whose idle connections are closed when t ends.
func (s *Server) Client(t testing.TB) *s3.Client {
	t.Helper()
	c, err := s3store.NewClient(context.Background(),
		config.WithBaseEndpoint(s.Endpoint), config.WithRegion(Region),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(AccessKey, SecretKey, "")),
		config.WithEC2IMDSClientEnableState(imds.ClientDisabled),
		config.WithSharedConfigFiles([]string{}), config.WithSharedCredentialsFiles([]string{}))
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	c = s.Pin(c)
	t.Cleanup(func() {
		if h, ok := c.Options().HTTPClient.(interface{ CloseIdleConnections() }); ok {
			h.CloseIdleConnections()
		}
	})
	return c
}

// Pin returns a copy of c that talks to the server, path-style, whatever
// AWS_ENDPOINT_URL_S3 says.
func (s *Server) Pin(c *s3.Client) *s3.Client {
	return s3.New(c.Options(), func(o *s3.Options) {
		o.BaseEndpoint, o.UsePathStyle = aws.String(s.Endpoint), true
	})
}

// Bucket creates a bucket on the server.
func (s *Server) Bucket(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Client(t).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("s3test: create bucket %s: %v", name, err)
	}
}
