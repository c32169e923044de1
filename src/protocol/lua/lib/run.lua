-- Shared by the scripts that run a caller's commands (guarded writes and
-- the fencing helpers).
--
-- `run(from)` runs the commands packed in `ARGV` from index `from` on:
-- per command, its number of arguments (its name included), then those
-- arguments. Each runs with `redis.pcall`, in order. It returns
-- `{1, reply, ...}` with every reply, or `{2, i, error}` when command `i`
-- replied with an error: the commands before it ran and stay run (a
-- script does not roll back), the ones after it did not run.
--
-- Expects in scope: nothing but Redis's `redis`.
-- What this file defines, a script may leave unused (luacheck is told so):
-- luacheck: push ignore 211/run
local function run(from)
  local out, i, n = {1}, from, 0
  while i <= #ARGV do
    local argc = tonumber(ARGV[i])
    n = n + 1
    local reply = redis.pcall(unpack(ARGV, i + 1, i + argc))
    if type(reply) == 'table' and reply.err then
      return {2, n, reply}
    end
    out[n + 1] = reply
    i = i + argc + 1
  end
  return out
end
-- luacheck: pop
