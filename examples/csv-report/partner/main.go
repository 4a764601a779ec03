// Command partner serves the csv-report example's partner export on
// 127.0.0.1, requiring a bearer token: the remote end of the demo.
//
//	go run ./examples/csv-report/partner -addr 127.0.0.1:8765 -token "$PARTNER_TOKEN"
//	go run ./examples/csv-report/partner -print-action > actions/csv-report.yaml  # worker -actions actions
//	go run ./examples/csv-report/partner -print-spec | go run ./cmd/enqueue -wait -
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"

	csvreport "github.com/airlock-run/airlock/examples/csv-report"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8765", "address to listen on")
	token := flag.String("token", os.Getenv("PARTNER_TOKEN"), "the bearer token requests must carry (env PARTNER_TOKEN; default: a new one, printed)")
	rows := flag.Int("rows", 500, "rows of the export")
	printSpec := flag.Bool("print-spec", false, "print the example's call of the csv-report action (spec.json) and exit (for enqueue -)")
	printAction := flag.Bool("print-action", false, "print the csv-report action's definition, fetching from this -addr, and exit (for a worker's -actions directory)")
	flag.Parse()
	if *printSpec {
		fmt.Print(string(csvreport.CallJSON()))
		return
	}
	if *printAction {
		b, err := csvreport.Definition("http://" + *addr)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Print(string(b))
		return
	}
	if *token == "" {
		*token = csvreport.NewToken()
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("partner: serving http://%s/export.csv, token %s\n", ln.Addr(), *token)
	log.Fatal(http.Serve(ln, &csvreport.Partner{Token: *token, Rows: *rows}))
}
