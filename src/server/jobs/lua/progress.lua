-- ARGV: P id replica progress running run
local key = P .. 'job:' .. ARGV[2]
local j = redis.call('HMGET', key, 'state', 'holder', 'run')
if not j[1] or not is_open(j[1]) or j[2] ~= ARGV[3] or j[3] ~= ARGV[6] then return 0 end
redis.call('HSET', key, 'progress', ARGV[4])
if j[1] == 'QUEUED' and ARGV[5] == '1' then
  redis.call('HSET', key, 'state', 'RUNNING')
  incr(P .. 'counts', 'queued', -1)
  incr(P .. 'counts', 'running', 1)
end
return 1
