-- ARGV: P replica lease_ms max_takeovers ttl_ms max_bytes tomb_ms limit
-- -> {{id, owner, request, request_id, end_user, takeover, run}...}, failed, cancelled
-- A claim is a new run of the job (run + 1) that is not started yet: its takeover is counted
-- when the new holder first renews it (kRenew), so that a claim whose reply never reached its
-- replica lapses without spending jobs.max_takeovers.
local now = now_ms()
if settle_pause(now, tonumber(ARGV[3])) > 0 then return {{}, 0, 0} end
local due = redis.call('ZRANGEBYSCORE', P .. 'open', '-inf', now, 'LIMIT', 0, tonumber(ARGV[8]))
local taken, failed, cancelled = {}, 0, 0
for _, id in ipairs(due) do
  local key = P .. 'job:' .. id
  local j = redis.call('HMGET', key, 'owner', 'state', 'lease', 'takeovers', 'cancel', 'request',
      'request_id', 'end_user', 'run')
  if not j[1] or not is_open(j[2]) then
    redis.call('ZREM', P .. 'open', id)
  elseif tonumber(j[3]) > now then
    redis.call('ZADD', P .. 'open', j[3], id)
  elseif j[5] == '1' then
  end_job(id, j[1], j[2], 'CANCELLED', 1, 'CANCELLED',
        'cancelled by its client (the replica running it stopped before it ended)', '',
        now, tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]))
    cancelled = cancelled + 1
  elseif tonumber(j[4]) >= tonumber(ARGV[4]) then
  end_job(id, j[1], j[2], 'FAILED', 14, 'UNAVAILABLE',
        'the replica running job ' .. id .. ' stopped renewing its lease, and the job was ' ..
        'already run again ' .. j[4] .. ' times (jobs.max_takeovers); submit it again',
        '', now, tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]))
    failed = failed + 1
  else
    local takeover = tonumber(j[4]) + 1
    local run = tonumber(j[9] or '1') + 1
    local lease = now + tonumber(ARGV[3])
    redis.call('HSET', key, 'holder', ARGV[2], 'lease', lease, 'run', run, 'started', 0,
        'progress', '')
    if j[2] == 'RUNNING' then
      redis.call('HSET', key, 'state', 'QUEUED')
      incr(P .. 'counts', 'running', -1)
      incr(P .. 'counts', 'queued', 1)
    end
    redis.call('ZADD', P .. 'open', lease, id)
    table.insert(taken, {id, j[1], j[6] or '', j[7] or '', j[8] or '', takeover, run})
  end
end
return {taken, failed, cancelled}
