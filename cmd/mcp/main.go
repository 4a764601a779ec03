// Command mcp is Airlock's MCP server for agents: the tools run_action,
// get_run, wait_run, get_result and cancel_run (frontend/mcpserver) over
// stdio, for an agent host that starts it, or over streamable HTTP at /mcp
// with -http:
//
//	mcp [flags]                  serve on stdin/stdout
//	mcp -http ADDR [flags]       serve streamable HTTP at http://ADDR/mcp
//
// It enqueues actions and reads their records and published results; it
// never approves an output. Logs go to stderr (on stdio, stdout is the
// protocol). See mcp -h.
package main

import "github.com/airlock-run/airlock/internal/cli"

func main() { cli.Main(Run) }
