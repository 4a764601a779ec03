package session

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// hasRoom answers what pushIfOpen would, without pushing: "room" when the
// session is open with fewer than ARGV[1] calls waiting, else its state
// ("" when there is none, "busy" when the calls are full).
var hasRoom = redis.NewScript(`
local st = redis.call('HGET', KEYS[1], 'state')
if st ~= 'open' and st ~= 'paused' then return st or '' end
if redis.call('LLEN', KEYS[2]) >= tonumber(ARGV[1]) then return 'busy' end
return 'room'`)

// Room says whether session id would take a call now: nil when it is
// open with fewer than MaxQueuedCalls waiting, else the error Call would
// return (404, 409 not open yet or busy, 410 ended). A front end checks it
// before it reads a call's data (an HTTP body): Call checks again when it
// pushes, so Room only spares the reading of a call that would be refused.
func (c *Conn) Room(ctx context.Context, id string) error {
	st, err := hasRoom.Run(ctx, c.rdb, []string{c.stateKey(id), c.callsKey(id)}, MaxQueuedCalls).Text()
	if err != nil {
		return fmt.Errorf("session %s: %w", id, err)
	}
	if st == "room" {
		return nil
	}
	return c.notOpen(ctx, id, st)
}
