package airlock

// Version is Airlock's version: what every command's -version prints,
// and what the worker writes into run records ("worker": "host/pid
// VERSION") and logs, the worker's metrics label and the MCP server's
// implementation version. One variable, so that they all agree. A release
// build sets it with the linker:
//
//	go build -ldflags "-X github.com/airlock-run/airlock.Version=1.2.3" ./cmd/...
var Version = "0.1.0-dev"
