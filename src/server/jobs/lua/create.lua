-- ARGV: P id owner request_id request end_user replica lease_ms max_per_key max_jobs tomb_ms
--       idempotency_key digest
-- -> {'ok', now}, {'existing', id} (the key's job: a retry), {'conflict', id} (the key's job is
-- another request's), {'per_key', n}, {'max_jobs', n}, {'exists', 0}
local now = now_ms()
local tomb_ms = tonumber(ARGV[11])
expire_due(now, tomb_ms, 100)
local id, owner = ARGV[2], ARGV[3]
local idem = ''
if ARGV[12] ~= '' then
  -- The owner's key, unambiguous whatever either holds (the owner's length first).
  idem = P .. 'idem:' .. string.len(owner) .. ':' .. owner .. ':' .. ARGV[12]
  local e = redis.call('HMGET', idem, 'id', 'digest')
  if e[1] and redis.call('EXISTS', P .. 'job:' .. e[1]) == 1 then
    if e[1] == id then return {'ok', now} end  -- this create sent again (below)
    if e[2] ~= ARGV[13] then return {'conflict', e[1]} end
    -- Handed to a client now: a create whose first answer was lost is no longer settled away.
    redis.call('HSET', P .. 'job:' .. e[1], 'acked', 1)
    return {'existing', e[1]}
  end
end
local open = tonumber(redis.call('HGET', P .. 'owner-open', owner) or '0')
if open >= tonumber(ARGV[9]) then return {'per_key', open} end
while tonumber(redis.call('HGET', P .. 'counts', 'records') or '0') >= tonumber(ARGV[10]) do
  local holder = largest_holder(P .. 'owner-records', P .. 'owner-ended:')
  if not holder then
    return {'max_jobs', tonumber(redis.call('HGET', P .. 'counts', 'records') or '0')}
  end
  drop(redis.call('ZRANGE', P .. 'owner-ended:' .. holder, 0, 0)[1], 'jobs', tomb_ms)
end
local made = redis.call('HMGET', P .. 'job:' .. id, 'owner', 'holder', 'created')
if made[1] then
  -- This very create sent again (the client resends a pipeline a demoted primary refused): the
  -- job it made, not a clash of ids.
  if made[1] == owner and made[2] == ARGV[7] then return {'ok', tonumber(made[3])} end
  return {'exists', 0}
end
local lease = now + tonumber(ARGV[8])
redis.call('HSET', P .. 'job:' .. id, 'owner', owner, 'request_id', ARGV[4], 'request', ARGV[5],
    'end_user', ARGV[6], 'state', 'QUEUED', 'created', now, 'holder', ARGV[7],
    'lease', lease, 'takeovers', 0, 'cancel', 0, 'progress', '', 'run', 1, 'started', 1)
if idem ~= '' then
  redis.call('HSET', idem, 'id', id, 'digest', ARGV[13])
  redis.call('HSET', P .. 'job:' .. id, 'idem', idem)
end
redis.call('ZADD', P .. 'open', lease, id)
incr(P .. 'counts', 'queued', 1)
incr(P .. 'counts', 'records', 1)
incr(P .. 'owner-open', owner, 1)
incr(P .. 'owner-records', owner, 1)
return {'ok', now}
