//! The operator's commands: `holder`, `list`, `break`, `audit`, `leader`
//! and `observe`. A hold is read and broken under its own prefix (the
//! library finds it under the prefixes nested in `--prefix`, or under
//! every prefix without one); a name found free is looked for under every
//! prefix, and where it is held said on stderr.

use std::io::Write as _;
use std::process::ExitCode;

use redmutex::{LockInfo, LockKind};

use crate::args::{AuditArgs, BreakArgs, HolderArgs, LeaderArgs, ListArgs, Server};
use crate::connect::{locker, shown};
use crate::exit::{chain, failed, usage, UNAVAILABLE};
use crate::{holder, leader, ops};

/// `redmutex holder`.
pub fn holder(args: &HolderArgs) -> ExitCode {
    let locker = match locker(&args.server, None, None, None) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let info = match locker.holder(&args.key) {
        Ok(info) => info,
        Err(e) => return failed(&e, &shown(&args.server)),
    };
    let waiters = info.as_ref().map_or(0, |i| i.waiters().len());
    let waiters = u64::try_from(waiters).unwrap_or(u64::MAX);
    let prefix = args.server.prefix.as_deref();
    let line = if args.json {
        holder::json(prefix, &args.key, info.as_ref(), waiters)
    } else {
        holder::text(prefix, &args.key, info.as_ref(), waiters)
    };
    print(&line);
    if info.is_some() {
        ExitCode::SUCCESS
    } else {
        say_elsewhere(&args.server, &args.key, &|_| true);
        ExitCode::from(1)
    }
}

/// The most keys a database may hold for a hint's walk (`holder`, `break`
/// and `leader` of a name found free, `audit` of a prefix without events):
/// the walk costs about one round trip per 500 keys, so this bounds it at
/// about 200. Past it the hint is not looked for, and that is said.
const HINT_MOST_KEYS: u64 = 100_000;

/// A locker without a prefix on `server`'s database, for a hint's walk
/// of it; `None` (said on stderr) when the database holds more than
/// [`HINT_MOST_KEYS`] keys, or (quietly: this is a hint, the answer is given
/// already) when its size cannot be had.
fn hint_walker(server: &Server) -> Option<redmutex::Locker> {
    let size = redmutex::redis::Client::open(server.url.as_str())
        .and_then(|c| c.get_connection_with_timeout(redmutex::DEFAULT_IO_TIMEOUT))
        .and_then(|mut c| {
            c.set_read_timeout(Some(redmutex::DEFAULT_IO_TIMEOUT))?;
            redmutex::redis::cmd("DBSIZE").query::<u64>(&mut c)
        })
        .ok()?;
    if size > HINT_MOST_KEYS {
        say!(
            "redmutex: not looked for under other prefixes: the database has {size} keys \
             (more than {HINT_MOST_KEYS}); `redmutex list` and `redmutex audit` without \
             --prefix walk them all"
        );
        return None;
    }
    let everywhere = Server {
        prefix: None,
        ..server.clone()
    };
    locker(&everywhere, None, None, None).ok()
}

/// The holds named `key` under any prefix (by their name there, or by
/// their whole key), found by a walk of the database without a prefix
/// (see [`hint_walker`]), but the one under `server`'s prefix (which was
/// found free); none when that fails (this is a hint: the answer is given
/// already).
fn elsewhere(server: &Server, key: &str, keep: &dyn Fn(&LockInfo) -> bool) -> Vec<LockInfo> {
    let Some(root) = hint_walker(server) else {
        return Vec::new();
    };
    let glob: String = key
        .chars()
        .flat_map(|c| match c {
            '*' | '?' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect();
    let asked = server.prefix.as_deref();
    let found = root.locks_matching(&format!("*{glob}")).unwrap_or_default();
    ops::sorted(found)
        .into_iter()
        .filter(|i| i.key() == key || i.key_in_prefix() == key)
        .filter(|i| (i.prefix(), i.key_in_prefix()) != (asked, key))
        .filter(|i| keep(i))
        .collect()
}

/// Says on stderr where else `key`, free under `server`'s prefix, is held
/// (among the holds `keep` takes), if anywhere.
fn say_elsewhere(server: &Server, key: &str, keep: &dyn Fn(&LockInfo) -> bool) {
    let found = elsewhere(server, key, keep);
    if let Some(line) = ops::elsewhere(key, server.prefix.as_deref(), &found) {
        say!("redmutex: {line}");
    }
}

/// `redmutex list`.
pub fn list(args: &ListArgs) -> ExitCode {
    let locker = match locker(&args.server, None, None, None) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let holds = match locker.locks_matching(args.pattern.as_deref().unwrap_or("*")) {
        Ok(holds) => holds,
        Err(e) => return failed(&e, &shown(&args.server)),
    };
    let holds = ops::sorted(holds);
    print(&if args.json {
        ops::json(&holds)
    } else {
        ops::table(&holds)
    });
    ExitCode::SUCCESS
}

/// `redmutex break`.
pub fn break_lock(args: &BreakArgs) -> ExitCode {
    let locker = match locker(&args.server, None, None, None) {
        Ok(l) => l,
        Err(code) => return code,
    };
    match locker.break_lock(&args.key, &args.reason) {
        Ok(Some(info)) => {
            print(&ops::broken(&info, &args.reason));
            ExitCode::SUCCESS
        }
        Ok(None) => {
            print("free: nothing broken\n");
            say_elsewhere(&args.server, &args.key, &|_| true);
            ExitCode::from(1)
        }
        Err(e) => failed(&e, &shown(&args.server)),
    }
}

/// `redmutex audit`.
pub fn audit(args: &AuditArgs) -> ExitCode {
    let locker = match locker(&args.server, None, None, None) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let since = args
        .since
        .and_then(|d| std::time::SystemTime::now().checked_sub(d));
    match locker.audit_all(since) {
        Ok(events) => {
            print(&if args.json {
                ops::audit_json(&events)
            } else {
                ops::audit_text(&events)
            });
            if let (true, Some(prefix)) = (events.is_empty(), &args.server.prefix) {
                say_trails(&args.server, prefix, since);
            }
            ExitCode::SUCCESS
        }
        Err(e) => failed(&e, &shown(&args.server)),
    }
}

/// Says on stderr under which prefixes there are audit events since
/// `since` when `prefix`'s trails have none (a hint: failures are quiet;
/// see [`hint_walker`]).
fn say_trails(server: &Server, prefix: &str, since: Option<std::time::SystemTime>) {
    let Some(root) = hint_walker(server) else {
        return;
    };
    let events = root.audit_all(since).unwrap_or_default();
    if let Some(line) = ops::trails_elsewhere(prefix, &events) {
        say!("redmutex: {line}");
    }
}

/// Writes `text` to stdout. A closed stdout loses it; the exit code still
/// tells the outcome.
fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
}

/// The election of `args` and its locker, or the exit code of a usage
/// error.
fn election(args: &LeaderArgs) -> Result<(redmutex::Election, redmutex::Locker), ExitCode> {
    let locker = locker(&args.server, None, None, None)?;
    let election = locker.election(&args.name).map_err(|e| match e {
        redmutex::Error::InvalidInput(m) => usage(&m),
        e => usage(&e.to_string()),
    })?;
    Ok((election, locker))
}

/// Says on stderr under which other prefixes the election `args.name` has
/// a leader, when it has none under `args`' prefix.
fn say_led_elsewhere(args: &LeaderArgs) {
    let name = format!("__redmutex__:election:{}", args.name);
    let led = |i: &LockInfo| i.kind() == LockKind::Leader && i.name() == args.name;
    let found = elsewhere(&args.server, &name, &led);
    let prefixes: Vec<Option<&str>> = found.iter().map(LockInfo::prefix).collect();
    if let Some(line) = leader::elsewhere(&args.name, args.server.prefix.as_deref(), &prefixes) {
        say!("redmutex: {line}");
    }
}

/// Writes one state as a line (with `queued`, the candidates queued, on a
/// line of their own or in the JSON object); false when stdout is closed.
fn print_leader(
    args: &LeaderArgs,
    leader: Option<&redmutex::Leader>,
    queued: Option<&[String]>,
) -> bool {
    let line = if args.json {
        leader::json(&args.name, leader, queued)
    } else {
        leader::text(leader) + &leader::queued_text(queued.unwrap_or_default())
    };
    let mut out = std::io::stdout().lock();
    out.write_all(line.as_bytes())
        .and_then(|()| out.flush())
        .is_ok()
}

/// `redmutex leader`.
pub fn show_leader(args: &LeaderArgs) -> ExitCode {
    let (election, locker) = match election(args) {
        Ok(e) => e,
        Err(code) => return code,
    };
    // The candidates queued, as a listing names them (a second read: the
    // lead may change in between).
    let key = format!("__redmutex__:election:{}", args.name);
    match election
        .leader()
        .and_then(|l| Ok((l, locker.holder(&key)?)))
    {
        Ok((leader, held)) => {
            let queued = held.map(|h| h.waiters().to_vec()).unwrap_or_default();
            // A closed stdout loses the answer; the exit code still tells it.
            print_leader(args, leader.as_ref(), Some(&queued));
            if leader.is_some() {
                ExitCode::SUCCESS
            } else {
                say_led_elsewhere(args);
                ExitCode::from(1)
            }
        }
        Err(e) => {
            say!("redmutex: {}: {}", shown(&args.server), chain(&e));
            ExitCode::from(UNAVAILABLE)
        }
    }
}

/// `redmutex observe`: runs until killed, or stdout is closed (exit 0).
pub fn observe(args: &LeaderArgs) -> ExitCode {
    let election = match election(args) {
        Ok((e, _)) => e,
        Err(code) => return code,
    };
    if matches!(election.leader(), Ok(None)) {
        say_led_elsewhere(args);
    }
    let observer = match election.observe() {
        Ok(o) => o,
        Err(e) => {
            say!("redmutex: {}: {}", shown(&args.server), chain(&e));
            return ExitCode::from(UNAVAILABLE);
        }
    };
    for change in observer {
        match change {
            Ok(leader) => {
                if !print_leader(args, leader.as_ref(), None) {
                    return ExitCode::SUCCESS;
                }
            }
            // Said, and followed on: the observer goes on from where it was
            // once Redis answers again.
            Err(e) => say!("redmutex: {}: {}", shown(&args.server), chain(&e)),
        }
    }
    ExitCode::SUCCESS
}
