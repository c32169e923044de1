-- Logs an election's new leader once its candidate holds the election
-- key (granted, or handed over and taken up), before the candidate is
-- told it leads. When the latest entry is another leader's, that leader
-- left without resigning (its lease ran out, or was lost): "no leader" is
-- logged first, so the log holds every change in order. After a
-- hand-over to this candidate, taken up (or granted again) before its
-- claim ran out, nothing is logged before it: the lead passed without a
-- gap. After a hand-over to another candidate, which never took the lead
-- up (killed while queued), or to this one, stalled past its claim, the
-- election was without a leader meanwhile: "no leader" is logged first,
-- after the resigned term, as live observers saw it. When the key was set
-- to its TTL is read from its PTTL (a renewal in between makes it look
-- later: "no leader" then is logged for a gap there was not, the same in
-- every observer's eyes). An empty or missing
-- log (the first leader, or a log that expired a day after its last
-- change while a leader led on) says nothing of the leader before: "no
-- leader" after every term below this one is logged first, which an
-- observer that yielded no earlier leader skips.
--
-- - `KEYS[1]`: the election key, `KEYS[2]`: the log (see `lib/log.lua`).
-- - `ARGV[1]`: owner token, `ARGV[2]`: the log's cap in entries,
--   `ARGV[3]`: how long the log is kept after this change, in ms,
--   `ARGV[4]`: the TTL in ms the candidate's grant or take-up set.
--
-- Replies: 1 when the key is ours (its leader logged, now or by the
-- resignation that handed it over); 0 when not (nothing is logged).
--
-- Helpers: owned mint log
local v = redis.pcall('GET', KEYS[1])
if not ours(v, ARGV[1]) then return 0 end
local term, value = leader_of(v)
if not term then return 0 end
local last, resigned, to, till = last_entry(KEYS[2])
if last == term then return 1 end
if last == '>' then
  local taken = to == nil
  if to == redis.sha1hex(ARGV[1]) then
    -- When the key was last set to the TTL: at the take-up, or a grant.
    local set = clock() - (tonumber(ARGV[4]) - redis.call('PTTL', KEYS[1]))
    taken = till == nil or set <= tonumber(till) + 2
  end
  if not taken then
    record(KEYS[2], '', resigned, ARGV[2], ARGV[3])
  end
elseif last == nil then
  -- Exact while terms stay below 2^53 (microseconds: until the year 2255).
  record(KEYS[2], '', string.format('%d', tonumber(term) - 1), ARGV[2], ARGV[3])
elseif last ~= '' then
  record(KEYS[2], '', last, ARGV[2], ARGV[3])
end
record(KEYS[2], term, value, ARGV[2], ARGV[3])
return 1
