-- ARGV: P id (a submit refused at once, or one whose create Redis may have run after its answer
-- was given up on: the record goes without a trace unless another replica took it over and runs
-- it, or a client has been given it since, by its idempotency key)
local j = redis.call('HMGET', P .. 'job:' .. ARGV[2], 'state', 'run', 'acked')
if j[1] and is_open(j[1]) and j[2] == '1' and j[3] ~= '1' then drop(ARGV[2], '', 0) end
return 1
