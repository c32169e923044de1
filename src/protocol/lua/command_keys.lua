-- Asks the server which keys a caller's commands name, and the arity of
-- each command name, in one exchange (for a guarded write or a fenced
-- run, see `protocol/commands.rs`). A pipeline of `COMMAND GETKEYS` would
-- be read one reply at a time, each within the whole read timeout: one
-- timeout per command on a hung server.
--
-- - No `KEYS`: the script reads and writes no key.
-- - `ARGV[1]`: how many command names follow, `k`; `ARGV[2..k+1]`: the
--   distinct names, for `COMMAND INFO`; then the commands as `run` of
--   lib/run.lua takes them: per command, its number of arguments (its
--   name included), then those.
--
-- Replies: an array of 1 + the number of commands: first, per name (in
-- their order), its arity as `COMMAND INFO` gives it, followed by each
-- subcommand's full name (`name|sub`) and arity (Redis 7 lists them), or
-- nil for an unknown name; nil instead of the whole list when `COMMAND
-- INFO` was refused (an ACL user denied it). Then per command: the array
-- of the keys it names, as `COMMAND GETKEYS` gave it; the error message
-- `COMMAND GETKEYS` gave instead (unknown command, wrong number of
-- arguments, no key arguments); or 0 for a command of one word, which is
-- not asked. (No error is nested in the reply: redis-rs would make the
-- first one the whole call's error. Nor the whole of `COMMAND INFO`: its
-- entries nest deep and weigh kilobytes.)
--
-- Helpers: (none)
local k = tonumber(ARGV[1])
-- A name's arity, then each subcommand's name and arity.
local function arities(entry)
  if not entry then return false end
  local out = {entry[2]}
  if type(entry[10]) == 'table' then
    for _, sub in ipairs(entry[10]) do
      out[#out + 1] = sub[1]
      out[#out + 1] = sub[2]
    end
  end
  return out
end
local info = {}
-- In parts: `unpack` takes at most about 8,000 values.
for first = 2, k + 1, 1000 do
  local part = redis.pcall('COMMAND', 'INFO', unpack(ARGV, first, math.min(first + 999, k + 1)))
  if part.err then
    info = false
    break
  end
  for j = 1, #part do info[#info + 1] = arities(part[j]) end
end
local out, i, n = {info}, k + 2, 1
while i <= #ARGV do
  local argc = tonumber(ARGV[i])
  n = n + 1
  if argc > 1 then
    local keys = redis.pcall('COMMAND', 'GETKEYS', unpack(ARGV, i + 1, i + argc))
    out[n] = keys.err or keys
  else
    out[n] = 0
  end
  i = i + argc + 1
end
return out
