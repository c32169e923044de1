//! A caller's commands, to run inside one of the crate's scripts (a
//! guarded write, a fenced one; see `lua/lib/run.lua`): their arguments
//! taken from a `redis::Pipeline`, the keys they name, and the script's
//! reply read back.
//!
//! The keys are asked of the server in one exchange for all the commands,
//! by a script (`lua/command_keys.lua`) whose one reply a hung server costs
//! one read timeout, where a pipeline's replies each cost one: `COMMAND
//! GETKEYS` knows every command's key positions (those of modules too),
//! where a table of our own would go stale. The same reply refuses an
//! unknown command or a wrong number of arguments before anything runs. A
//! command of one word (`PING`, `TIME`) names no key and is not asked about
//! (`COMMAND GETKEYS` takes none such); its arity, as that of any command
//! that names no key, is checked against what `COMMAND INFO` says, asked
//! in the same script.

use redis::{Arg, ConnectionLike, Pipeline, RedisResult, Value};

use crate::protocol::replies;
use crate::protocol::scripts;
use crate::protocol::slots;
use crate::Error;

/// The most arguments one command may have: Lua's `unpack`, which hands
/// them to `redis.pcall`, fails past about 8,000.
pub(crate) const MAX_ARGS: usize = 7_000;

/// The commands of a pipeline, each as its arguments (its name first).
pub(crate) struct Commands {
    cmds: Vec<Vec<Vec<u8>>>,
    /// Whose replies the caller wants: not those of commands marked
    /// `ignore()` (see [`kept`]).
    kept: Vec<usize>,
}

impl Commands {
    /// The commands of `pipe`, checked: none empty, none with a cursor
    /// argument, none longer than [`MAX_ARGS`], none that touches every key
    /// ([`touches_every_key`]). The pipeline's `atomic`
    /// flag is not looked at: the script that runs them is atomic anyway.
    pub(crate) fn of(pipe: &Pipeline) -> Result<Commands, Error> {
        let mut cmds = Vec::with_capacity(pipe.len());
        for (i, cmd) in pipe.cmd_iter().enumerate() {
            let mut args = Vec::with_capacity(cmd.args_iter().len());
            for arg in cmd.args_iter() {
                match arg {
                    Arg::Simple(a) => args.push(a.to_vec()),
                    _ => {
                        return Err(Error::InvalidInput(format!(
                            "command {} has a cursor argument, which a script cannot take",
                            i + 1
                        )))
                    }
                }
            }
            if args.is_empty() || args.len() > MAX_ARGS {
                return Err(Error::InvalidInput(format!(
                    "command {} has {} arguments: 1 to {MAX_ARGS} can run in a script",
                    i + 1,
                    args.len()
                )));
            }
            if let Some(name) = args.first().filter(|n| touches_every_key(n)) {
                return Err(Error::InvalidInput(format!(
                    "command {} ({}) touches every key, the lock's (or the fence's) among \
                     them: it cannot run guarded",
                    i + 1,
                    String::from_utf8_lossy(name).to_uppercase()
                )));
            }
            cmds.push(args);
        }
        Ok(Commands {
            kept: kept(pipe),
            cmds,
        })
    }

    /// The replies of the commands the pipeline did not mark `ignore()`,
    /// as `Pipeline::query` would return them.
    pub(crate) fn kept_replies(&self, replies: Vec<Value>) -> Vec<Value> {
        if self.kept.len() == replies.len() {
            return replies;
        }
        // A mask, not `kept.contains` per reply: that was quadratic in the
        // commands (a pipeline of 150,000 took minutes).
        let mut keep = vec![false; replies.len()];
        for &i in &self.kept {
            if let Some(k) = keep.get_mut(i) {
                *k = true;
            }
        }
        replies
            .into_iter()
            .zip(keep)
            .filter_map(|(v, k)| k.then_some(v))
            .collect()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.cmds.is_empty()
    }

    /// The command's name, for messages (never its arguments: they may
    /// hold anything).
    fn name(&self, i: usize) -> String {
        self.cmds
            .get(i)
            .and_then(|c| c.first())
            .map(|n| String::from_utf8_lossy(n).to_uppercase())
            .unwrap_or_default()
    }

    /// Every key the commands name, in order, asked of the server in one
    /// exchange: a script (`lua/command_keys.lua`) that asks `COMMAND
    /// GETKEYS` of each command and `COMMAND INFO` of their names, and
    /// replies once, so a hung server costs one read timeout whatever the
    /// number of commands (a pipeline's replies are read one at a time,
    /// each within the whole timeout). `packed`: the commands as
    /// [`Commands::packed`] gives them. An unknown command or one with the
    /// wrong number of arguments is [`Error::InvalidInput`], and nothing
    /// has run: `COMMAND GETKEYS` tells so of a command that names keys;
    /// of one that names none (it says only "no key arguments") or has
    /// one word (it is not asked), the arity that `COMMAND INFO` gives
    /// tells.
    pub(crate) fn keys(
        &self,
        c: &mut dyn ConnectionLike,
        packed: &[Vec<u8>],
    ) -> Result<Vec<Vec<u8>>, Error> {
        let names = self.names();
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let reply = scripts::command_keys(&names, packed).invoke::<Value>(c)?;
        let Value::Array(replies) = reply else {
            return Err(replies::unexpected("command keys", &reply));
        };
        if replies.len() != self.cmds.len() + 1 {
            return Err(replies::unexpected("command keys", &Value::Array(replies)));
        }
        let mut replies = replies.into_iter();
        // An ACL user may be refused COMMAND INFO (NOPERM): the arity check
        // of keyless commands is then skipped, and the server refuses them
        // when their turn comes, as before.
        let infos: Vec<Value> = match replies.next() {
            Some(Value::Array(items)) => items,
            _ => Vec::new(),
        };
        let mut keys = Vec::new();
        for (i, reply) in replies.enumerate() {
            let refused = |why: &str| {
                Error::InvalidInput(format!(
                    "command {} ({}) refused before anything ran: {why}",
                    i + 1,
                    self.name(i),
                ))
            };
            match reply {
                // A command of one word, not asked: its arity tells.
                Value::Int(0) => self.check_arity(i, &names, &infos).map_err(refused)?,
                // Its error: Redis says "no key arguments" of a command
                // that takes no key (PUBLISH), whose arity then tells.
                Value::BulkString(error) => {
                    let error = String::from_utf8_lossy(&error);
                    if error.contains("no key arguments") {
                        self.check_arity(i, &names, &infos).map_err(refused)?;
                    } else {
                        // Without its code word (`ERR`).
                        let why = error.split_once(' ').map_or(&*error, |(_, why)| why);
                        return Err(refused(why));
                    }
                }
                k => keys.extend(
                    redis::from_redis_value::<Vec<Vec<u8>>>(k)
                        .map_err(|e| Error::Redis(e.into()))?,
                ),
            }
        }
        Ok(keys)
    }

    /// The commands' names, in lower case, each once.
    fn names(&self) -> Vec<Vec<u8>> {
        let mut names: Vec<Vec<u8>> = self
            .cmds
            .iter()
            .filter_map(|c| c.first())
            .map(|n| n.to_ascii_lowercase())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Whether command `i`'s number of arguments fits the arity of its
    /// name (`infos`, in the order of `names`, each as
    /// `lua/command_keys.lua` gives it: the arity, then each subcommand's
    /// full name and arity), or its subcommand's (Redis 7 lists them);
    /// `Err` says why not. A reply it cannot read refuses nothing: the
    /// server still refuses the command when its turn comes.
    fn check_arity(
        &self,
        i: usize,
        names: &[Vec<u8>],
        infos: &[Value],
    ) -> Result<(), &'static str> {
        let Some(args) = self.cmds.get(i) else {
            return Ok(());
        };
        let Some(name) = args.first().map(|n| n.to_ascii_lowercase()) else {
            return Ok(());
        };
        let Some(info) = names.binary_search(&name).ok().and_then(|at| infos.get(at)) else {
            return Ok(());
        };
        let Value::Array(entry) = info else {
            return if matches!(info, Value::Nil) {
                Err("unknown command")
            } else {
                Ok(())
            };
        };
        if !fits(entry.first(), args.len()) {
            return Err("wrong number of arguments");
        }
        let subs = entry.get(1..).unwrap_or_default();
        if subs.is_empty() || args.len() < 2 {
            return Ok(());
        }
        let mut full = name;
        full.push(b'|');
        full.extend(
            args.get(1)
                .map(|a| a.to_ascii_lowercase())
                .unwrap_or_default(),
        );
        let sub = subs.chunks(2).find_map(|pair| match pair {
            [Value::BulkString(n), arity] => (n[..] == full[..]).then_some(arity),
            [Value::SimpleString(n), arity] => (n.as_bytes() == &full[..]).then_some(arity),
            _ => None,
        });
        match sub {
            Some(arity) if !fits(Some(arity), args.len()) => Err("wrong number of arguments"),
            Some(_) => Ok(()),
            None => Err("unknown subcommand"),
        }
    }

    /// The commands packed as `run` of `lua/lib/run.lua` takes them: per
    /// command, its number of arguments, then those.
    pub(crate) fn packed(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::with_capacity(self.cmds.iter().map(|c| c.len() + 1).sum());
        for cmd in &self.cmds {
            out.push(cmd.len().to_string().into_bytes());
            out.extend(cmd.iter().cloned());
        }
        out
    }
}

/// Whether command `name` deletes or moves every key of a database while
/// naming none (`FLUSHDB`, `FLUSHALL`, `SWAPDB`): it would take the lock's
/// own keys with the rest, which `COMMAND GETKEYS` cannot tell.
fn touches_every_key(name: &[u8]) -> bool {
    [&b"FLUSHDB"[..], b"FLUSHALL", b"SWAPDB"]
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n))
}

/// The indices of `pipe`'s commands whose replies its `query` returns
/// (those not marked `ignore()`, which redis-rs keeps to itself): the
/// pipeline is run on a connection that answers each command with its
/// index, and never goes to a server.
fn kept(pipe: &Pipeline) -> Vec<usize> {
    struct Indices(usize);
    impl ConnectionLike for Indices {
        fn req_packed_command(&mut self, _: &[u8]) -> RedisResult<Value> {
            Ok(Value::Nil)
        }
        fn req_packed_commands(
            &mut self,
            _: &[u8],
            offset: usize,
            count: usize,
        ) -> RedisResult<Vec<Value>> {
            let each: Vec<Value> = (0..self.0)
                .map(|i| Value::Int(i64::try_from(i).unwrap_or(-1)))
                .collect();
            // A transaction's replies come as one array, after MULTI's and
            // the QUEUED ones (which `offset` skips).
            Ok(if count == 1 && offset > 0 {
                vec![Value::Array(each)]
            } else {
                each
            })
        }
        fn get_db(&self) -> i64 {
            0
        }
        fn check_connection(&mut self) -> bool {
            true
        }
        fn is_open(&self) -> bool {
            true
        }
    }
    let all: Vec<usize> = (0..pipe.len()).collect();
    match pipe.query::<Vec<Value>>(&mut Indices(pipe.len())) {
        Ok(kept) => kept
            .iter()
            .filter_map(|v| match v {
                Value::Int(i) => usize::try_from(*i).ok(),
                _ => None,
            })
            .collect(),
        Err(_) => all,
    }
}

/// Whether `argc` arguments (the name included) fit `arity` as `COMMAND
/// INFO` gives it: exactly `n` for `n > 0`, at least `-n` for `n < 0`. An
/// arity it cannot read fits.
fn fits(arity: Option<&Value>, argc: usize) -> bool {
    let Some(Value::Int(arity)) = arity else {
        return true;
    };
    let argc = i64::try_from(argc).unwrap_or(i64::MAX);
    if *arity >= 0 {
        *arity == 0 || argc == *arity
    } else {
        argc >= -*arity
    }
}

/// On a Cluster: every key of the commands must be in `slot`, the lock's.
pub(crate) fn check_slot(keys: &[Vec<u8>], slot: u16, lock_key: &str) -> Result<(), Error> {
    for k in keys {
        // Slotted by its bytes: a key need not be UTF-8.
        if slots::slot_of_bytes(k) != slot {
            let text = String::from_utf8_lossy(k);
            return Err(Error::InvalidInput(format!(
                "key {text:?} is not in the hash slot of lock key {lock_key:?}: on a Redis \
                 Cluster a guarded write's keys must share the lock's slot; give them the same \
                 hash tag, as {{order42}}:balance beside a lock named {{order42}}"
            )));
        }
    }
    Ok(())
}

/// What the script `run` replied: `{1, reply, ...}` is every command's
/// reply; `{2, i, error}` the error of command `i`, returned as the call's
/// error (the commands before it ran). Any other reply is `None`, for the
/// caller to read (`{0}`: not ours, nothing ran).
pub(crate) fn read_run(reply: Value) -> Result<Result<Vec<Value>, i64>, Error> {
    let Value::Array(mut items) = reply else {
        return Err(replies::unexpected("run", &reply));
    };
    match items.first() {
        Some(Value::Int(1)) => {
            items.remove(0);
            Ok(Ok(items))
        }
        Some(Value::Int(2)) => match items.pop() {
            Some(Value::ServerError(e)) => Err(Error::Redis(e.into())),
            other => Err(replies::unexpected("run", &other.unwrap_or(Value::Nil))),
        },
        Some(Value::Int(code)) => Ok(Err(*code)),
        _ => Err(replies::unexpected("run", &Value::Array(items))),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn commands_are_packed_with_their_lengths() {
        let mut pipe = redis::pipe();
        pipe.set("a", 1).cmd("PING");
        let commands = Commands::of(&pipe).unwrap();
        let packed: Vec<String> = commands
            .packed()
            .into_iter()
            .map(|a| String::from_utf8(a).unwrap())
            .collect();
        assert_eq!(packed, ["3", "SET", "a", "1", "1", "PING"]);
    }

    #[test]
    fn ignored_replies_are_left_out_as_query_leaves_them() {
        let mut pipe = redis::pipe();
        pipe.incr("a", 1).ignore().get("a").del("a").ignore();
        assert_eq!(kept(&pipe), [1]);
        pipe.atomic();
        assert_eq!(kept(&pipe), [1]);
        let commands = Commands::of(&pipe).unwrap();
        let replies = vec![Value::Int(1), Value::Okay, Value::Int(0)];
        assert_eq!(commands.kept_replies(replies), [Value::Okay]);
        let mut plain = redis::pipe();
        plain.get("a");
        assert_eq!(kept(&plain), [0]);
        assert!(kept(&redis::pipe()).is_empty());
    }

    #[test]
    fn cursor_arguments_are_refused() {
        let mut scan = redis::cmd("SCAN");
        scan.cursor_arg(0);
        let mut pipe = redis::pipe();
        pipe.add_command(scan);
        assert!(matches!(Commands::of(&pipe), Err(Error::InvalidInput(_))));
    }

    #[test]
    fn a_key_in_another_slot_names_the_hash_tag_rule() {
        let lock = "{order42}";
        let slot = slots::slot(lock);
        let same = [b"{order42}:balance".to_vec()];
        assert!(check_slot(&same, slot, lock).is_ok());
        let other = [b"{order42}:a".to_vec(), b"balance".to_vec()];
        match check_slot(&other, slot, lock) {
            Err(Error::InvalidInput(msg)) => assert!(msg.contains("hash tag"), "{msg}"),
            r => panic!("expected InvalidInput, got {r:?}"),
        }
    }

    #[test]
    fn arities_are_read_as_command_info_gives_them() {
        let arity = |n| Some(Value::Int(n));
        assert!(fits(arity(2).as_ref(), 2));
        assert!(!fits(arity(2).as_ref(), 1));
        assert!(!fits(arity(2).as_ref(), 3));
        assert!(fits(arity(-2).as_ref(), 2));
        assert!(fits(arity(-2).as_ref(), 9));
        assert!(!fits(arity(-2).as_ref(), 1));
        // An arity it cannot read refuses nothing.
        assert!(fits(Some(&Value::Nil), 1));
        assert!(fits(None, 1));
        assert!(touches_every_key(b"flushdb") && touches_every_key(b"SwapDB"));
        assert!(!touches_every_key(b"FLUSH"));
    }

    #[test]
    fn a_run_reply_is_read() {
        let ok = Value::Array(vec![Value::Int(1), Value::Okay, Value::Nil]);
        assert_eq!(read_run(ok).unwrap().unwrap(), [Value::Okay, Value::Nil]);
        assert_eq!(read_run(Value::Array(vec![Value::Int(0)])).unwrap(), Err(0));
        assert!(read_run(Value::Int(1)).is_err());
    }
}
