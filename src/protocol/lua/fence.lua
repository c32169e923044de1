-- A resource's fence: admits a fencing token at least as high as the
-- highest it has seen (and records it), refuses a lower one; with
-- commands, runs them only when the token is admitted.
--
-- - `KEYS[1]`: the resource's fence key (a decimal string, kept without a
--   TTL: one that expired would let a stale token in); then, with a TTL in
--   `ARGV[2]`, the call's run marker (as `guarded.lua`'s: a resend of the
--   call finds it and runs nothing); then every key the commands name.
--   `ARGV[1]`: the token, in decimal; `ARGV[2]`: the marker's TTL in ms,
--   or empty for no marker; from `ARGV[3]` on, the commands, as `run` of
--   lib/run.lua takes them.
--
-- Tokens are compared as decimal strings (by length, then digit by
-- digit), so tokens past 2^53 compare exactly, as Lua's numbers would not.
--
-- Replies: `{0}` when the token is stale (nothing ran, nothing recorded);
-- `{-1}` when the key holds something other than a token (nothing ran);
-- `{3}` when the marker was set (an earlier send of this call ran);
-- otherwise as `run`: `{1, reply, ...}` or `{2, i, error}`.
--
-- Helpers: run
local marker = ARGV[2] ~= '' and KEYS[2]
if marker and redis.call('EXISTS', marker) == 1 then return {3} end
local seen = redis.pcall('GET', KEYS[1])
if type(seen) == 'table' or (seen and seen ~= '0' and not string.match(seen, '^[1-9]%d*$')) then
  return {-1}
end
local token = ARGV[1]
if seen and (#seen > #token or (#seen == #token and seen > token)) then
  return {0}
end
if seen ~= token then redis.call('SET', KEYS[1], token) end
if marker then redis.call('SET', marker, '1', 'PX', ARGV[2]) end
return run(3)
