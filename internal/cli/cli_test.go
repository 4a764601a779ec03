package cli

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/events"
)

func TestNewLogger(t *testing.T) {
	var b bytes.Buffer
	log, err := NewLogger("json", "warn", &b)
	if err != nil {
		t.Fatal(err)
	}
	log.Info().Msg("dropped")
	log.Warn().Msg("kept")
	if s := b.String(); strings.Contains(s, "dropped") || !strings.Contains(s, `"message":"kept"`) || !strings.Contains(s, `"time":`) {
		t.Errorf("json at warn: %q", s)
	}
	b.Reset()
	if log, err = NewLogger("console", "debug", &b); err != nil {
		t.Fatal(err)
	}
	log.Debug().Msg("hello")
	if s := b.String(); !strings.Contains(s, "DBG") || !strings.Contains(s, "hello") || strings.HasPrefix(s, "{") {
		t.Errorf("console at debug: %q", s)
	}
	for _, c := range []struct{ format, level, flag string }{{"xml", "info", "-log-format"}, {"json", "loud", "-log-level"}} {
		if _, err := NewLogger(c.format, c.level, io.Discard); err == nil || !strings.HasPrefix(err.Error(), c.flag+":") {
			t.Errorf("NewLogger(%q, %q): %v, want an error naming %s", c.format, c.level, err, c.flag)
		}
	}
}

func TestRedisFlags(t *testing.T) {
	t.Setenv("REDIS_URL", "redis://example:6379/3")
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	r := RedisFlags(fs)
	if r.URL != "redis://example:6379/3" || r.Prefix != DefaultPrefix || DefaultPrefix != events.DefaultPrefix {
		t.Fatalf("defaults: %+v (DefaultPrefix %q, events %q)", r, DefaultPrefix, events.DefaultPrefix)
	}
	if u := fs.Lookup("redis").Usage; !strings.Contains(u, "(default from $REDIS_URL)") {
		t.Errorf("-redis usage: %q", u)
	}
	if err := fs.Parse([]string{"-redis", "redis://other/1", "-prefix", "p:"}); err != nil {
		t.Fatal(err)
	}
	// Registered again (approve's flags after its command): the values
	// parsed first are the defaults, a flag given again wins.
	sub := flag.NewFlagSet("x sub", flag.ContinueOnError)
	r.Register(sub)
	if err := sub.Parse([]string{"-prefix", "q:"}); err != nil {
		t.Fatal(err)
	}
	if r.URL != "redis://other/1" || r.Prefix != "q:" || r.CheckPrefix() != nil {
		t.Errorf("after two parses: %+v", r)
	}
	r.Prefix = "a{b}:"
	if err := r.CheckPrefix(); err == nil || !strings.HasPrefix(err.Error(), "-prefix ") {
		t.Errorf("a prefix with a brace: %v", err)
	}
}

// selfSigned writes a certificate and key for 127.0.0.1 and returns their
// files and the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, cert *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ = x509.ParseCertificate(der)
	return certFile, keyFile, cert
}

func TestListen(t *testing.T) {
	ln, scheme, err := Listen("-addr", "127.0.0.1:0", "", "")
	if err != nil || scheme != "http" {
		t.Fatalf("plain: %s, %v", scheme, err)
	}
	addr := ln.Addr().String()
	// The address taken: the error names the flag.
	if _, _, err := Listen("-http", addr, "", ""); err == nil || !strings.HasPrefix(err.Error(), "-http: ") {
		t.Errorf("address in use: %v", err)
	}
	ln.Close()
	// A bad key pair fails before anything listens.
	if _, _, err := Listen("-addr", addr, "/nonexistent.pem", "/nonexistent.key"); err == nil || !strings.HasPrefix(err.Error(), "-tls-cert/-tls-key: ") {
		t.Errorf("bad key pair: %v", err)
	}
	if ln, err := net.Listen("tcp", addr); err != nil {
		t.Errorf("%s still taken after a refused key pair: %v", addr, err)
	} else {
		ln.Close()
	}

	certFile, keyFile, cert := selfSigned(t)
	ln, scheme, err = Listen("-addr", "127.0.0.1:0", certFile, keyFile)
	if err != nil || scheme != "https" {
		t.Fatalf("TLS: %s, %v", scheme, err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	for _, c := range []struct {
		max uint16
		ok  bool
	}{{tls.VersionTLS13, true}, {tls.VersionTLS12, true}, {tls.VersionTLS11, false}} {
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS10, MaxVersion: c.max})
		if err == nil {
			conn.Close()
		}
		if (err == nil) != c.ok {
			t.Errorf("handshake up to TLS version %#x: %v, want success %v", c.max, err, c.ok)
		}
	}
}

func TestFlagSetAndFlagsExit(t *testing.T) {
	fs := NewFlagSet("cmd", "usage: cmd [flags]\n")
	fs.Bool("v", false, "verbose")
	var out, errOut bytes.Buffer
	err := Parse(fs, []string{"-h"}, &out, &errOut)
	if code := FlagsExit(&out, &errOut, "cmd", false, err); code != ExitOK ||
		!strings.HasPrefix(out.String(), "usage: cmd [flags]\n") || !strings.Contains(out.String(), "-v\tverbose") || errOut.Len() != 0 {
		t.Errorf("-h: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
	out.Reset()
	err = Parse(NewFlagSet("cmd", ""), []string{"-x"}, &out, &errOut)
	if code := FlagsExit(&out, &errOut, "cmd", false, err); code != ExitUsage ||
		errOut.String() != "cmd: flag provided but not defined: -x (see cmd -h)\n" || out.Len() != 0 {
		t.Errorf("bad flag (said once by Parse): exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
	errOut.Reset()
	if code := FlagsExit(&out, &errOut, "cmd", true, errors.New("-n: must be positive")); code != ExitUsage ||
		out.String() != `{"error":"-n: must be positive","code":2}`+"\n" || errOut.Len() != 0 {
		t.Errorf("a flag's check, -json: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
}
