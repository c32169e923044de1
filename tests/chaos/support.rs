//! What the coordinator's parts share: the lock names of Redis keys, the
//! keys sections are recorded under, the bounds the checker holds a run
//! to, and where a failing run's history is kept.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::common::fence_in;
use crate::history::{Limits, READ_SUFFIX};
use crate::worker::{FAST_KEYS, PREFIX, RW_NAME, SEM_NAME, SEM_PERMITS, SLOW_KEY};
use crate::{BACKOFF_MAX, SLACK, TTL};

/// Lock keys and their values as victims: (lock name, fencing token, the
/// worker named in the metadata).
pub(crate) fn victims_of(values: Vec<(String, String)>) -> Vec<(String, u64, Option<u32>)> {
    values
        .into_iter()
        .filter_map(|(k, v)| {
            let worker = v
                .rsplit(':')
                .next()
                .and_then(|m| m.strip_prefix('w'))
                .and_then(|n| n.parse().ok());
            Some((lock_name(&k)?, fence_in(&v)?, worker))
        })
        .collect()
}

/// Adds the counts of `from` to `into`, key by key.
pub(crate) fn add_counts(into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (k, n) in from {
        *into.entry(k.clone()).or_default() += n;
    }
}

pub(crate) fn nanos(d: Duration) -> u64 {
    d.as_nanos() as u64
}

/// The lock name of a Redis key, if it is a lock key (not a counter, queue
/// or the broken locker's counter).
pub(crate) fn lock_name(redis_key: &str) -> Option<String> {
    let name = redis_key.strip_prefix(PREFIX)?.strip_prefix(':')?;
    // A semaphore's permit `i`: recorded as `<name>#<i>`.
    if let Some(permit) = name.strip_prefix("__redmutex__:permit:") {
        let (i, sem) = permit.split_once(':')?;
        return Some(format!("{sem}#{i}"));
    }
    // A read-write lock's writer, `<name>`; one of its read holds, or the
    // set of them (what a writer checks), `<name>.r`.
    if let Some(rw) = name.strip_prefix("__redmutex__:rw-write:") {
        return Some(rw.to_owned());
    }
    if let Some(read) = name.strip_prefix("__redmutex__:rw-read:") {
        let (_, rw) = read.split_once(':')?;
        return Some(format!("{rw}{READ_SUFFIX}"));
    }
    if let Some(rw) = name.strip_prefix("__redmutex__:rw-readers:") {
        return Some(format!("{rw}{READ_SUFFIX}"));
    }
    (!name.starts_with("__redmutex__") && name != "broken-fence").then(|| name.to_owned())
}

/// The keys the workers' sections are recorded under.
pub(crate) fn section_keys() -> Vec<String> {
    let permits = (0..SEM_PERMITS).map(|i| format!("{SEM_NAME}#{i}"));
    FAST_KEYS
        .iter()
        .chain([&SLOW_KEY])
        .map(|k| (*k).to_owned())
        .chain(permits)
        .chain([RW_NAME.to_owned(), crate::linear::LOCK.to_owned()])
        .collect()
}

/// Where the history of a run with violations is kept: under
/// `REDMUTEX_CHAOS_KEEP` when set, else beside the report
/// (`<REDMUTEX_CHAOS_REPORT>.history`), else in the temporary directory.
pub(crate) fn history_dir() -> PathBuf {
    if let Ok(keep) = std::env::var("REDMUTEX_CHAOS_KEEP") {
        return PathBuf::from(keep);
    }
    if let Ok(report) = std::env::var("REDMUTEX_CHAOS_REPORT") {
        return PathBuf::from(format!("{report}.history"));
    }
    std::env::temp_dir().join(format!("redmutex-chaos-history-{}", std::process::id()))
}

/// The bounds the checker holds a run to, with `op` the bound of one
/// operation.
pub(crate) fn limits(op: Duration) -> Limits {
    Limits {
        ttl: nanos(TTL),
        renew: nanos(TTL / 3),
        op: nanos(op),
        backoff: nanos(BACKOFF_MAX),
        slack: nanos(SLACK),
        kept_leases: false,
    }
}
