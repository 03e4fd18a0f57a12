-- ARGV: P tomb_ms limit
return expire_due(now_ms(), tonumber(ARGV[2]), tonumber(ARGV[3]))
