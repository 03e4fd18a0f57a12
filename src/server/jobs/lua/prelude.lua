-- What every script shares: the key prefix in ARGV[1] and the caller's deadline in ARGV[2] (Redis
-- time, ms; 0 for none: taken out of ARGV, so that a script's own arguments start at ARGV[2]),
-- Redis' clock, the counts, and how an ended job goes (drop), how a job ends (end_job), the
-- evictions and expiry of job_store.h, and how a pause of everyone's access shifts the leases.
--
-- A script that runs after its caller's deadline does nothing and answers 'late': the caller has
-- answered UNAVAILABLE already (a submit's 503 "not made"), and a command that waited in the
-- socket of a Redis that stalled (SIGSTOP, a long fork, a failover) must not then make a ghost
-- job, take a job over for a replica that gave up on the claim, or renew a lease nobody renews.
local P = ARGV[1]
local DEADLINE = tonumber(ARGV[2])
table.remove(ARGV, 2)
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if DEADLINE > 0 and now_ms() > DEADLINE then return 'late' end
local function incr(hash, field, by)
  local v = redis.call('HINCRBY', hash, field, by)
  if v <= 0 and hash ~= P .. 'counts' then redis.call('HDEL', hash, field) end
  return v
end
local count_of = {QUEUED = 'queued', RUNNING = 'running', SUCCEEDED = 'succeeded',
      FAILED = 'failed', CANCELLED = 'cancelled'}
local function is_open(state) return state == 'QUEUED' or state == 'RUNNING' end
local function drop(id, why, tomb_ms)
  local key = P .. 'job:' .. id
  local j = redis.call('HMGET', key, 'owner', 'state', 'finished', 'result_bytes', 'idem')
  redis.call('ZREM', P .. 'ended', id)
  if not j[1] then return end
  if j[5] then redis.call('DEL', j[5]) end
  local owner, state = j[1], j[2]
  local bytes = tonumber(j[4] or '0') or 0
  incr(P .. 'counts', count_of[state], -1)
  incr(P .. 'counts', 'records', -1)
  incr(P .. 'owner-records', owner, -1)
  if is_open(state) then
    incr(P .. 'owner-open', owner, -1)
    redis.call('ZREM', P .. 'open', id)
  end
  if bytes > 0 then
    incr(P .. 'counts', 'result_bytes', -bytes)
    incr(P .. 'owner-bytes', owner, -bytes)
    redis.call('ZREM', P .. 'owner-lru:' .. owner, id)
  end
  redis.call('ZREM', P .. 'owner-ended:' .. owner, id)
  redis.call('DEL', key, P .. 'result:' .. id)
  if why ~= '' then
    redis.call('HSET', P .. 'tomb:' .. id, 'owner', owner, 'why', why, 'finished', j[3] or '0')
    redis.call('PEXPIRE', P .. 'tomb:' .. id, tomb_ms)
  end
  redis.call('PUBLISH', P .. 'job-ended', id)
end
local function largest_holder(hash, evictable)
  local all = redis.call('HGETALL', hash)
  local best, most = nil, -1
  for i = 1, #all, 2 do
    local n = tonumber(all[i + 1])
    if n > most and redis.call('ZCARD', evictable .. all[i]) > 0 then best, most = all[i], n end
  end
  return best
end
local function evict_bytes(max_bytes, tomb_ms)
  while tonumber(redis.call('HGET', P .. 'counts', 'result_bytes') or '0') > max_bytes do
    local owner = largest_holder(P .. 'owner-bytes', P .. 'owner-lru:')
    if not owner then return end
    drop(redis.call('ZRANGE', P .. 'owner-lru:' .. owner, 0, 0)[1], 'bytes', tomb_ms)
  end
end
local function expire_due(now, tomb_ms, limit)
  local due = redis.call('ZRANGEBYSCORE', P .. 'ended', '-inf', now, 'LIMIT', 0, limit)
  for _, id in ipairs(due) do drop(id, 'expired', tomb_ms) end
  return #due
end
local function end_job(id, owner, old_state, state, code, status, message, payload, now, ttl_ms,
      max_bytes, tomb_ms)
  local key = P .. 'job:' .. id
  incr(P .. 'counts', count_of[old_state], -1)
  incr(P .. 'counts', count_of[state], 1)
  incr(P .. 'owner-open', owner, -1)
  redis.call('ZREM', P .. 'open', id)
  redis.call('HSET', key, 'state', state, 'finished', now, 'code', code, 'status', status,
      'message', message, 'holder', '')
  local seq = redis.call('INCR', P .. 'seq')
  redis.call('ZADD', P .. 'ended', now + ttl_ms, id)
  redis.call('ZADD', P .. 'owner-ended:' .. owner, seq, id)
  if state == 'SUCCEEDED' then
    local bytes = string.len(payload)
    redis.call('SET', P .. 'result:' .. id, payload)
    redis.call('HSET', key, 'result_bytes', bytes)
    incr(P .. 'counts', 'result_bytes', bytes)
    incr(P .. 'owner-bytes', owner, bytes)
    redis.call('ZADD', P .. 'owner-lru:' .. owner, seq, id)
    if bytes > max_bytes then
      -- Could never be held, however much else went: evicted at once (job_store.h).
      drop(id, 'bytes', tomb_ms)
      return
    end
    evict_bytes(max_bytes, tomb_ms)
  end
  redis.call('PUBLISH', P .. 'job-ended', id)
end
-- Leases count the time Redis could be reached. Every replica's tick writes the heartbeat (a
-- third of a lease apart); a gap of over half a lease means nobody could reach Redis (it
-- stalled, or failed over, or every replica was down): every open lease moves out by the gap,
-- and to a lease from now at least, so that jobs whose replicas are alive are not taken over
-- for the outage, and the rest are taken over about a lease after Redis is back.
local function settle_pause(now, lease_ms)
  local last = tonumber(redis.call('GET', P .. 'heartbeat') or '0')
  redis.call('SET', P .. 'heartbeat', now)
  if last == 0 or now - last <= lease_ms / 2 then return 0 end
  local gap = now - last
  local open = redis.call('ZRANGE', P .. 'open', 0, -1, 'WITHSCORES')
  for i = 1, #open, 2 do
    -- At least a whole lease from now: a replica that is alive gets back to Redis in it (its
    -- client may still be waiting out a reconnect backoff), however little was left before.
    local shifted = math.max(tonumber(open[i + 1]) + gap, now + lease_ms)
    redis.call('ZADD', P .. 'open', shifted, open[i])
    redis.call('HSET', P .. 'job:' .. open[i], 'lease', shifted)
  end
  return gap
end
