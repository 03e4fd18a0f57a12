-- ARGV: P id replica state code status message payload ttl_ms max_bytes tomb_ms run
-- The job's current run ends it however it ended. Another run of it (one that the replica lost
-- the lease of while it worked, Redis away) ends it only with a result: generation is
-- deterministic, so any run's mesh is the job's, and the first one written wins (the other runs
-- stop when they hear job-ended). A cancel wins over a late finish.
local key = P .. 'job:' .. ARGV[2]
local j = redis.call('HMGET', key, 'owner', 'state', 'run', 'started', 'cancel')
if not j[1] then return 'gone' end
if not is_open(j[2]) then return 'ended' end
local current = j[3] == ARGV[12]
local state, code, status, message, payload = ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
if j[5] == '1' then
  state, code, status, message, payload = 'CANCELLED', 1, 'CANCELLED',
      'cancelled by its client (CancelMeshJob or DELETE /v1/jobs/{id})', ''
elseif not current and state ~= 'SUCCEEDED' then
  return 'not_current'
end
if current and j[4] == '0' then
  -- A takeover's run that ended before its first renewal: it ran, so it counts.
  redis.call('HSET', key, 'started', 1)
  redis.call('HINCRBY', key, 'takeovers', 1)
end
end_job(ARGV[2], j[1], j[2], state, code, status, message, payload, now_ms(),
    tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11]))
if current then return 'ok' end
return 'ok_earlier_run'
