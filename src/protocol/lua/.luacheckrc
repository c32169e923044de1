-- luacheck's configuration for the crate's Lua scripts, which Redis runs
-- (Lua 5.1, with Redis's libraries and no global of the script's own).
-- A script is linted as Redis runs it: after the helpers of its
-- `-- Helpers:` line, from lib/, in that order (.ci/lint-lua assembles them).
std = "lua51"
-- Redis gives every script these; a script may not create globals.
read_globals = {
    "redis", "KEYS", "ARGV",
    "cjson", "cmsgpack", "bit", "struct",
}
-- A line of code may run past 100 columns; one past 120 is hard to read.
max_line_length = 120
