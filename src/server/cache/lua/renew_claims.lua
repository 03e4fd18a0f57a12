-- Extends each of our claims (KEYS) by ARGV[2] ms; another replica's is left alone.
local renewed = 0
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    redis.call('PEXPIRE', key, ARGV[2])
    renewed = renewed + 1
  end
end
return renewed
