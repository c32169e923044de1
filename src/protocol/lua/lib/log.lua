-- Shared by an election's scripts: its log is a stream of changes, capped
-- at a number of entries (the oldest trimmed first) and kept for a while
-- after its latest change. Each entry has three fields, in that order:
-- `term` (the new leader's fencing token), `value` (its value) and `n`
-- (its number in the log: 1 for the first entry of a log that did not
-- exist, so an observer that began before it existed knows when entries
-- were trimmed before it read them); for
-- "no leader", `term` is `''` and `value` the term of the leader whose
-- leadership ended (so an observer that already saw a later leader knows
-- the entry is older news); for a resignation that handed the lead to a
-- queued candidate, `term` is `>`, `value` the resigned term, and a fourth
-- field `to` the SHA-1 of the candidate's owner token (never the token:
-- anyone who reads the log may see it) and a fifth, `until`, when its
-- claim runs out (server clock, ms), so that the next announcement knows
-- whether the leader it logs is that candidate, granted or taking the
-- lead up before its claim ran out (no gap: the lead passed at once), or
-- another one, after a candidate that never took it up (killed while
-- queued), or the same one, stalled past its claim.
--
-- `record` appends one change (`to`, `till`: nil but for a hand-over),
-- `last_entry` reads the term, value, `to` and `until` of the latest entry
-- (nil for an empty or missing log), `leader_of` splits a lock value
-- `<token>:<fence>:<value>` into its term and value, and `ended` logs what
-- follows a leadership whose key held `v` and was just freed (a
-- resignation, an operator's break): the hand-over of `key` to `head` as a
-- claim (at server time `now`, ms), or no leader.
--
-- Expects in scope: nothing but Redis's `redis`.
-- What this file defines, a script may leave unused (luacheck is told so):
-- luacheck: push ignore 211/record 211/last_entry 211/leader_of 211/ended
local function record(log, term, value, cap, kept_for, to, till)
  local last = redis.call('XREVRANGE', log, '+', '-', 'COUNT', 1)[1]
  local n = 1
  if last then n = (tonumber(last[2][6]) or 0) + 1 end
  if to then
    redis.call('XADD', log, 'MAXLEN', cap, '*', 'term', term, 'value', value,
      'n', n, 'to', to, 'until', till)
  else
    redis.call('XADD', log, 'MAXLEN', cap, '*', 'term', term, 'value', value, 'n', n)
  end
  redis.call('PEXPIRE', log, kept_for)
end
local function last_entry(log)
  local last = redis.call('XREVRANGE', log, '+', '-', 'COUNT', 1)[1]
  if not last then return nil end
  return last[2][2], last[2][4], last[2][8], last[2][10]
end
local function leader_of(v)
  return string.match(v, '^[^:]*:(%d+):(.*)$')
end
local function ended(log, key, v, head, now, cap, kept_for)
  local term = leader_of(v) or ''
  if head then
    -- The claim runs out its PTTL from now.
    local till = now + redis.call('PTTL', key)
    record(log, '>', term, cap, kept_for, redis.sha1hex(head), till)
  else
    record(log, '', term, cap, kept_for)
  end
end
-- luacheck: pop
