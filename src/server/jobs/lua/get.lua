-- ARGV: P id owner touch tomb_ms
local id, owner = ARGV[2], ARGV[3]
local key = P .. 'job:' .. id
local j = redis.call('HMGET', key, 'owner', 'state', 'progress', 'request_id', 'created',
    'finished', 'code', 'status', 'message', 'takeovers')
if not j[1] or j[1] ~= owner then
  local t = redis.call('HMGET', P .. 'tomb:' .. id, 'owner', 'why', 'finished')
  if t[1] and t[1] == owner then return {'gone', t[2], t[3]} end
  return {'unknown'}
end
local expires = redis.call('ZSCORE', P .. 'ended', id) or '0'
if not is_open(j[2]) and tonumber(expires) <= now_ms() then
  drop(id, 'expired', tonumber(ARGV[5]))
  return {'gone', 'expired', j[6]}
end
local result = ''
if j[2] == 'SUCCEEDED' then
  result = redis.call('GET', P .. 'result:' .. id) or ''
  if ARGV[4] == '1' then
    redis.call('ZADD', P .. 'owner-lru:' .. owner, 'XX', redis.call('INCR', P .. 'seq'), id)
  end
end
return {'job', j[2], j[3] or '', j[4] or '', j[5] or '0', j[6] or '0', j[7] or '0', j[8] or '',
      j[9] or '', j[10] or '0', expires, result}
