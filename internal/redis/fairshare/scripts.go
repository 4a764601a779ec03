package fairshare

import "github.com/redis/go-redis/v9"

// The Lua the scripts share: a principal's quota, the quotas that refuse
// a new run and its count against them, the census of its claimed runs,
// and the release of its held runs into the queue.
//
// Keys of one queue q and principal p, all in q's Cluster slot (hash tag
// {q}, asynq's own):
//
//	asynq:{q}:g:p:<p>            zset: p's held runs (asynq's group), by enqueue time
//	asynq:{q}:groups             set: asynq's groups of q
//	asynq:{q}:pending            list: runs waiting for a worker (asynq's)
//	asynq:{q}:t:<id>             hash: a task (asynq's; its state field)
//	<P>fair:{q}:claim:<p>        zset: p's runs released (waiting or, with max_active, running), by release time
//	<P>fair:{q}:sessions:<p>     zset: p's open sessions, by open time
//	<P>fair:{q}:rpm:<p>:<minute> string: p's runs admitted in that minute
//	<P>quotas:{q}                hash: principal (or "*") → its quota, JSON; "#window" → the window (PublishQuotas)
const luaLib = `
-- A run's score in its line: asynq's enqueue gives it the second
-- (< ADMITTED); its admission, the microsecond (>= ADMITTED). Only
-- admitted runs are released.
local ADMITTED = 1000000000000

-- num reads a quota's field: absent is no bound; anything but a whole
-- number of at least 0 is an error (the admission fails: closed).
local function num(v)
  if v == nil then return 0 end
  if type(v) ~= "number" or v < 0 or v ~= v or v == math.huge or v ~= math.floor(v) then
    error("fairshare: a quota field holds " .. tostring(v) .. ", not a whole number: fix the policy, then restart the queue's workers")
  end
  return v
end

-- quotaOf returns p's quota (its own, else "*"'s, else none) and the
-- queue's window as its workers published it ("#window": their slots),
-- never below the caller's.
local function quotaOf(qkey, p, window)
  local v = redis.call("HMGET", qkey, p, "*", "#window")
  local w = tonumber(v[3])
  if w and w > window and w <= 1000 then window = w end
  local raw = v[1]
  if p == "" or not raw then raw = v[2] end
  if not raw then return {}, window end
  local ok, q = pcall(cjson.decode, raw)
  if not ok or type(q) ~= "table" or string.sub(raw, 1, 1) ~= "{" then
    return redis.error_reply("fairshare: the quota of principal " .. p .. " in " .. qkey .. " is not a JSON object: delete the key, then restart the queue's workers")
  end
  local known = {max_queued = true, max_active = true, max_sessions = true, max_waiters = true, runs_per_minute = true, max_pending_bytes = true}
  for k, v in pairs(q) do
    if not known[k] then error("fairshare: the quota of principal " .. p .. " in " .. qkey .. " holds an unknown field " .. tostring(k)) end
    if k ~= "max_pending_bytes" then num(v) end
  end
  return q, window
end

-- rpmWait is how long (ms), from into ms into this minute, until one more
-- run fits the sliding window: prev (the last minute's count) weighs
-- less as the minute goes on, then this minute's count cur becomes the
-- last minute's.
local function rpmWait(prev, cur, rpm, into)
  local room = rpm - cur - 1
  if room >= 0 and prev > 0 then
    return math.max(1, 60000 * (1 - room / prev) - into)
  end
  local y = 0
  if cur > 0 then y = math.max(0, 60000 * (1 - (rpm - 1) / cur)) end
  return (60000 - into) + y
end

-- refusal checks a new run against the quotas that refuse one
-- (runs_per_minute: the counts of this minute and the last at rpmNow and
-- rpmLast; max_sessions, for a session, from p's open sessions, dropping
-- those that ended) and returns {quota, limit, retry after (s)} past one,
-- or nil.
local function refusal(q, tp, isSession, sessions, rpmNow, rpmLast, into)
  local rpm = num(q.runs_per_minute)
  if rpm > 0 then
    local cur = tonumber(redis.call("GET", rpmNow)) or 0
    local prev = tonumber(redis.call("GET", rpmLast)) or 0
    if prev * (60000 - into) / 60000 + cur + 1 > rpm then
      return {"runs_per_minute", rpm, math.max(1, math.ceil(rpmWait(prev, cur, rpm, into) / 1000))}
    end
  end
  local maxSessions = num(q.max_sessions)
  if isSession and maxSessions > 0 then
    local open = 0
    for _, sid in ipairs(redis.call("ZRANGE", sessions, 0, -1)) do
      local st = redis.call("HGET", tp .. sid, "state")
      if st and st ~= "completed" and st ~= "archived" then
        open = open + 1
      else
        redis.call("ZREM", sessions, sid)
      end
    end
    if open >= maxSessions then return {"max_sessions", maxSessions, 5} end
  end
  return nil
end

-- counted counts run id, admitted at ms, against the quotas refusal
-- checks.
local function counted(q, id, isSession, sessions, rpmNow, ms)
  if num(q.runs_per_minute) > 0 then
    redis.call("INCR", rpmNow)
    redis.call("PEXPIRE", rpmNow, 120000)
  end
  if isSession and num(q.max_sessions) > 0 then
    redis.call("ZADD", sessions, ms, id)
    redis.call("PEXPIRE", sessions, 86400000)
  end
end

-- census counts p's claimed runs that wait (pending, retry, scheduled) and,
-- when active counts, those that run; it drops the others (they ended, or
-- were deleted or canceled), and done (a run that ended for good). started
-- is a run the caller knows runs: counted as such without a read.
local function census(claim, tp, keepActive, done, started)
  local waiting, active = 0, 0
  for _, id in ipairs(redis.call("ZRANGE", claim, 0, -1)) do
    local st = "active"
    if id ~= started then st = redis.call("HGET", tp .. id, "state") end
    if id ~= done and (st == "pending" or st == "retry" or st == "scheduled") then
      waiting = waiting + 1
    elseif id ~= done and st == "active" and keepActive then
      active = active + 1
    else
      redis.call("ZREM", claim, id)
    end
  end
  return waiting, active
end

-- release moves p's oldest held runs into the queue while p has fewer than
-- window runs waiting there and, under max_active, fewer than it claimed
-- runs in all; it wakes the queue's idle workers when it moved any. Its
-- commands are few whatever it moves: one read of the line, one removal,
-- one push.
local function release(group, groups, pending, claim, tp, gname, window, maxActive, waiting, active, ms, ns, chan)
  local room = window - waiting
  if maxActive > 0 then room = math.min(room, maxActive - waiting - active) end
  if room <= 0 then return 0 end
  local ids = redis.call("ZRANGEBYSCORE", group, ADMITTED, "+inf", "LIMIT", 0, room)
  if #ids == 0 then return 0 end
  redis.call("ZREM", group, unpack(ids))
  local moved, scores = {}, {}
  for _, id in ipairs(ids) do
    if redis.call("HGET", tp .. id, "state") == "aggregating" then
      -- Admitted once: a retry goes back to the queue, not to the line
      -- (asynq's forwarder reads an empty group as none).
      redis.call("HSET", tp .. id, "state", "pending", "pending_since", ns, "group", "")
      moved[#moved + 1] = id
      scores[#scores + 1] = ms
      scores[#scores + 1] = id
    end
  end
  if redis.call("ZCARD", group) == 0 then redis.call("SREM", groups, gname) end
  if #moved == 0 then return 0 end
  redis.call("LPUSH", pending, unpack(moved))
  redis.call("ZADD", claim, unpack(scores))
  redis.call("PEXPIRE", claim, 86400000)
  if chan ~= "" then redis.call("PUBLISH", chan, "") end
  return #moved
end
`

// admitScript admits a run just added to its principal's group (asynq's
// AddToGroup), or refuses it — deleting it, so that a refusal leaves
// nothing — when it would take the principal past runs_per_minute,
// max_sessions or max_queued; then releases what the principal's share
// allows.
//
// KEYS: group, groups, pending, claim, sessions, quotas, rpm (this
// minute), rpm (the last minute). ARGV: task key prefix, group name,
// principal, task id, now (ms), now (ns), window, "1" for a session,
// wake channel, ms into this minute, now (µs).
//
// Returns {1, released} or {0, quota, limit, retry after (s)}.
var admitScript = redis.NewScript(luaLib + `
local group, groups, pending, claim, sessions, qkey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local tp, gname, p, id = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local ms, ns, window, isSession, chan, into = tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7]), ARGV[8] == "1", ARGV[9], tonumber(ARGV[10])
local q
q, window = quotaOf(qkey, p, window)
if q.err then return q end
local maxActive = num(q.max_active)

local at = redis.call("ZSCORE", group, id)
if not at then
  -- Not in its line: released by an earlier admission of it, or gone.
  return {1, 0}
end
if tonumber(at) >= ADMITTED then
  -- Admitted already (its admission again, an idempotent enqueue's
  -- duplicate): its share only.
  local waiting, active = census(claim, tp, maxActive > 0, "", "")
  return {1, release(group, groups, pending, claim, tp, gname, window, maxActive, waiting, active, ms, ns, chan)}
end
-- Its place once admitted: by the microsecond (the caller's clock), after
-- every admitted run of the line whatever the callers' clocks say.
local score = tonumber(ARGV[11])
local top = redis.call("ZRANGE", group, -1, -1, "WITHSCORES")
if #top == 2 and top[1] ~= id and tonumber(top[2]) >= score then score = tonumber(top[2]) + 1 end

-- A refusal deletes the run: it is in its line, never released.
local function refuse(name, limit, after)
  redis.call("ZREM", group, id)
  redis.call("DEL", tp .. id)
  if redis.call("ZCARD", group) == 0 then redis.call("SREM", groups, gname) end
  return {0, name, limit, after}
end

local r = refusal(q, tp, isSession, sessions, KEYS[7], KEYS[8], into)
if r then return refuse(r[1], r[2], r[3]) end
local waiting, active = census(claim, tp, maxActive > 0, "", "")
local maxQueued = num(q.max_queued)
if maxQueued > 0 and redis.call("ZCARD", group) + waiting > maxQueued then
  return refuse("max_queued", maxQueued, 5)
end
counted(q, id, isSession, sessions, KEYS[7], ms)
redis.call("ZADD", group, score, id)
return {1, release(group, groups, pending, claim, tp, gname, window, maxActive, waiting, active, ms, ns, chan)}
`)

// enqueueScript writes a new run and admits it in one call: what asynq's
// AddToGroup and admitScript did in two. The task is written only once
// admitted (a refusal writes nothing). A run whose principal holds no run
// in its line and has room in the queue goes straight to the queue
// (asynq's enqueue: pending); any other waits in its line, admitted, for
// release.
//
// KEYS: task, group, groups, pending, claim, sessions, quotas, rpm (this
// minute), rpm (the last minute). ARGV: task key prefix, group name,
// principal, task id, now (ms), now (ns), window, "1" for a session,
// wake channel, ms into this minute, now (µs), the task's asynq message.
//
// Returns {1, released} (the run released counts), {-1} when the task id
// exists, or {0, quota, limit, retry after (s)}.
var enqueueScript = redis.NewScript(luaLib + `
local tkey, group, groups, pending, claim, sessions, qkey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local tp, gname, p, id = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local ms, ns, window, isSession, chan, into = tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7]), ARGV[8] == "1", ARGV[9], tonumber(ARGV[10])
if redis.call("EXISTS", tkey) == 1 then return {-1} end
local q
q, window = quotaOf(qkey, p, window)
if q.err then return q end
local maxActive = num(q.max_active)
local r = refusal(q, tp, isSession, sessions, KEYS[8], KEYS[9], into)
if r then return {0, r[1], r[2], r[3]} end
local waiting, active = census(claim, tp, maxActive > 0, "", "")
local held = redis.call("ZCARD", group)
local maxQueued = num(q.max_queued)
if maxQueued > 0 and held + 1 + waiting > maxQueued then
  return {0, "max_queued", maxQueued, 5}
end
counted(q, id, isSession, sessions, KEYS[8], ms)
local room = window - waiting
if maxActive > 0 then room = math.min(room, maxActive - waiting - active) end
if held == 0 and room > 0 then
  -- Nothing of its principal's ahead of it: to the queue at once.
  redis.call("HSET", tkey, "msg", ARGV[12], "state", "pending", "pending_since", ns)
  redis.call("LPUSH", pending, id)
  redis.call("ZADD", claim, ms, id)
  redis.call("PEXPIRE", claim, 86400000)
  if chan ~= "" then redis.call("PUBLISH", chan, "") end
  return {1, 1}
end
-- Admitted, behind its principal's runs: by the microsecond, after every
-- admitted run of the line whatever the callers' clocks say.
local score = tonumber(ARGV[11])
if held > 0 then
  local top = redis.call("ZRANGE", group, -1, -1, "WITHSCORES")
  if #top == 2 and tonumber(top[2]) >= score then score = tonumber(top[2]) + 1 end
end
redis.call("HSET", tkey, "msg", ARGV[12], "state", "aggregating", "group", gname)
redis.call("ZADD", group, score, id)
redis.call("SADD", groups, gname)
return {1, release(group, groups, pending, claim, tp, gname, window, maxActive, waiting, active, ms, ns, chan)}
`)

// releaseScript releases what a principal's share allows, once one of its
// runs started or ended (ARGV done: that run no longer counts).
//
// KEYS: group, groups, pending, claim, quotas. ARGV: task key prefix,
// group name, principal, done task id or "", now (ms), now (ns), window,
// wake channel, started task id or "". A started run whose principal has
// no max_active (as published) and holds nothing costs three commands.
//
// Returns the runs released.
var releaseScript = redis.NewScript(luaLib + `
local group, groups, pending, claim, qkey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local tp, gname, p, done = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local ms, ns, window, chan = tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7]), ARGV[8]
local q
q, window = quotaOf(qkey, p, window)
if q.err then return q end
local maxActive = num(q.max_active)
if ARGV[9] ~= "" and maxActive == 0 then
  -- A run started whose principal's runs do not count while they run
  -- (no max_active, as published): it leaves the census, and with
  -- nothing held there is nothing to release.
  redis.call("ZREM", claim, ARGV[9])
  if redis.call("EXISTS", group) == 0 then return 0 end
end
local waiting, active = census(claim, tp, maxActive > 0, done, ARGV[9])
return release(group, groups, pending, claim, tp, gname, window, maxActive, waiting, active, ms, ns, chan)
`)

// withdrawScript deletes the runs of a principal's line whose admission
// never came (their enqueuer crashed or lost Redis between the enqueue
// and the admission, and was told so): enqueued before the cutoff, never
// admitted. At most 100 a call.
//
// KEYS: group, groups. ARGV: task key prefix, group name, cutoff (Unix s).
//
// Returns the runs withdrawn.
var withdrawScript = redis.NewScript(luaLib + `
local ids = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", "(" .. ARGV[3], "LIMIT", 0, 100)
if #ids == 0 then return 0 end
redis.call("ZREM", KEYS[1], unpack(ids))
for _, id in ipairs(ids) do
  if redis.call("HGET", ARGV[1] .. id, "state") == "aggregating" then redis.call("DEL", ARGV[1] .. id) end
end
if redis.call("ZCARD", KEYS[1]) == 0 then redis.call("SREM", KEYS[2], ARGV[2]) end
return #ids
`)
