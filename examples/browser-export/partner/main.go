// Command partner serves the browser-export example's partner back-office
// on 127.0.0.1 (a login form, an orders page whose "Export CSV" button
// builds the file in the browser) and prints the spec that drives it.
//
//	go run ./examples/browser-export/partner -addr 127.0.0.2:8766
//	go run ./examples/browser-export/partner -addr 127.0.0.2:8766 -print-spec | go run ./cmd/enqueue -wait -
//	go run ./examples/browser-export/partner -print-session    # the same run as a session: its open spec
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"

	browserexport "github.com/airlock-run/airlock/examples/browser-export"
)

func main() {
	addr := flag.String("addr", "127.0.0.2:8766", "address to listen on")
	password := flag.String("password", browserexport.DemoPassword, "the password of the user "+browserexport.DemoUser)
	rows := flag.Int("rows", 500, "rows of the export")
	printSpec := flag.Bool("print-spec", false, "print the run's spec (browse and export, then clean), pointed at -addr, and exit (for enqueue -)")
	printSession := flag.Bool("print-session", false, "print the session's open spec and, on stderr, its calls pointed at -addr, and exit")
	secret := flag.String("secret", "", "with -print-spec or -print-session: take the password from this granted secret instead of the spec")
	flag.Parse()
	login := browserexport.Login{User: browserexport.DemoUser, Password: *password, Secret: *secret}
	if *secret != "" {
		login.Password = ""
	}
	base := "http://" + *addr
	switch {
	case *printSpec:
		os.Stdout.Write(browserexport.Spec(base, login))
		return
	case *printSession:
		os.Stdout.Write(browserexport.SessionSpec(login))
		for _, s := range browserexport.SessionSteps(base, login) {
			fmt.Fprintf(os.Stderr, "%s\n", s)
		}
		return
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("partner: serving the back-office on http://%s/ (user %s)\n", ln.Addr(), browserexport.DemoUser)
	log.Fatal(http.Serve(ln, &browserexport.Partner{User: browserexport.DemoUser, Password: *password, Rows: *rows}))
}
