// Command approve lists, shows, accepts and rejects the run outputs parked
// in Airlock's approval queue:
//
//	approve [-redis URL] [-json] [-by NAME] COMMAND [flags] [ID]
//
//	list [-state pending|accepted|rejected|expired|all] [-limit N]
//	show ID
//	accept ID [-comment TEXT]      then queue its promotion
//	reject ID -comment TEXT
//	watch                          one line per new pending approval, until interrupted
//	history ID
//
// Flags go before the command or after it. It exits 0 on success, 2 on bad
// flags, command or arguments, 3 when the approval does not exist, 4 when
// it was decided already or has expired (stderr says by whom and when), 1
// on any other error. See approve -h.
package main

import "github.com/airlock-run/airlock/internal/cli"

func main() { cli.Main(Run) }
