package cli

import (
	"crypto/tls"
	"fmt"
	"net"
)

// Listen listens on TCP address addr, given by the flag named addrFlag
// ("-addr", "-http"), and returns the listener and its URL scheme: with a
// certificate (certFile and keyFile, the -tls-cert and -tls-key flags,
// both or neither) connections are served over TLS 1.2 or later
// ("https"), else in clear ("http"). The key pair is loaded before
// anything listens; an error names the flag it comes from.
func Listen(addrFlag, addr, certFile, keyFile string) (net.Listener, string, error) {
	var conf *tls.Config
	if certFile != "" || keyFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, "", fmt.Errorf("-tls-cert/-tls-key: %w", err)
		}
		conf = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", addrFlag, err)
	}
	if conf == nil {
		return ln, "http", nil
	}
	return tls.NewListener(ln, conf), "https", nil
}
