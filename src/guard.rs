//! `Guard`: proof of a held lock, released on drop.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::validate_ttl;
use crate::lease::watchdog::{Renewal, Watchdog};
use crate::lease::Lease;
use crate::raw::{Acquisition, RawLock};
use crate::time;
use crate::Error;

mod counted;
mod downgrade;
mod lease;

/// A held lock. The lock is released when the guard is dropped, or checked
/// with [`unlock`](Guard::unlock).
///
/// While the guard lives, its watchdog thread (unless turned off in the
/// builder) renews the lease every `ttl / 3`, checking ownership each time.
/// The moment the lease can no longer be promised, [`is_lost`](Guard::is_lost)
/// turns true for good; check it with [`ensure_held`](Guard::ensure_held)
/// before each step whose safety depends on the lock, and pass
/// [`fencing_token`](Guard::fencing_token) to the resource you protect so it
/// can refuse a stale holder. Between held and lost, the lease can be in
/// doubt (a renewal failed or is overdue): see [`state`](Guard::state) and
/// [`ensure_confirmed`](Guard::ensure_confirmed). Every guard has this
/// lease API, whatever it holds (a lock, several keys, a permit, a read or
/// a write hold).
///
/// # Dropping
///
/// `Drop` stops the watchdog (no renewal starts after that; one in flight is
/// waited for), then deletes the keys that are still ours. It never panics
/// and never deletes another owner's key. Its blocking is bounded: at most
/// two checkouts and two round trips (a renewal in flight and the delete),
/// each within the locker's timeouts (2 s each by default). Errors are
/// ignored: the lease then runs out within its TTL. Use [`unlock`](Guard::unlock) to see them.
///
/// # Resource leaking
///
/// A guard that is never dropped while its process lives
/// (`std::mem::forget`, `Box::leak`, a reference cycle of `Arc`s) keeps its
/// watchdog, which renews the lease for as long as the process lives: the
/// lock stays held, and nobody else gets it. [`Builder::max_hold`]
/// bounds even that: once `max_hold` has passed since the grant the
/// watchdog stops renewing, and the key expires at most one lease later
/// (the TTL, or the one of the guard's last [`extend`](Guard::extend)),
/// whether the guard was forgotten or is still in use. This holds
/// for every guard: a lock's, a permit's, a read or the write hold's, and a
/// [`Leadership`](crate::Leadership)'s (a forgotten leader is never
/// replaced without it).
///
/// A guard whose process ends without dropping it (killed, an abort on
/// panic), or one never dropped with no watchdog
/// ([`Builder::watchdog`]`(false)`), leaves its key in Redis until its
/// lease runs out: at most one lease, and others get the lock then.
///
/// [`Builder::max_hold`]: crate::Builder::max_hold
/// [`Builder::watchdog`]: crate::Builder::watchdog
///
/// ```no_run
/// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
/// let guard = locker.lock("payroll")?;
/// for batch in 0..10 {
///     guard.ensure_held()?; // stop writing the moment the lock is gone
///     println!("batch {batch} under token {}", guard.fencing_token());
/// }
/// guard.unlock()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct Guard {
    keys: Arc<[String]>,
    fence: u64,
    /// For a semaphore's permit: which one.
    permit: Option<u32>,
    lease: Arc<Lease>,
    /// Taken by `unlock` or `Drop`; always `Some` before that.
    held: Option<Held>,
}

/// What a guard needs to talk to Redis.
struct Held {
    shared: Arc<RawLock>,
    /// Shared with the watchdog.
    acquisition: Arc<Acquisition>,
    watchdog: Option<Watchdog>,
    /// The process that took the lock: a forked child's copy is not its.
    pid: u32,
    /// When it was granted (the stats' hold time).
    since: Instant,
    /// Its hold and loss count in the stats (see `count_in_stats`).
    counted: bool,
    /// Its grant is in the audit trail (with `Builder::audit`): only then
    /// is its release.
    audited: bool,
    /// Its number in the locker's registry of holds by thread (taken out
    /// when this ends: see `raw/held.rs`).
    filed: u64,
}

// `Guard` is `Send + Sync`: every field is (`Arc`s of `Send + Sync` data, a
// watchdog handle made of an `mpsc::Sender` and a `JoinHandle`). Its `&self`
// methods only touch the lease, whose state sits behind a mutex.

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The owner token is left out on purpose: it is what releases the lock.
        f.debug_struct("Guard")
            .field("keys", &self.keys)
            .field("permit", &self.permit)
            .field("fencing_token", &self.fence)
            .field("valid_until", &self.lease.valid_until())
            .field("state", &self.lease.state())
            .finish_non_exhaustive()
    }
}

impl Guard {
    /// Builds the guard the moment the lock is held (so any later error
    /// releases it through `Drop`), then starts its watchdog.
    pub(crate) fn new(
        shared: Arc<RawLock>,
        acquisition: Arc<Acquisition>,
        fence: u64,
        lease: Arc<Lease>,
    ) -> Result<Guard, Error> {
        let (watchdog_on, max_hold) = (shared.config.watchdog, shared.config.max_hold);
        // A hand-over's claim taken up before `lock` returns is a grant once
        // taken up (`count_in_stats`); one returned before its take-up is a
        // grant now: the caller holds it (a failed take-up is its loss).
        let audited = !lease.takes_up_before();
        if audited {
            shared.audit_held(&acquisition, fence, "grant");
        }
        let on_change = shared
            .config
            .on_lease_change
            .clone()
            .filter(|_| watchdog_on);
        let first = acquisition.caller_keys.first().map_or("", String::as_str);
        lease.watch(first, on_change, watchdog_on);
        let filed = shared.file(&acquisition, &lease);
        let mut guard = Guard {
            keys: Arc::clone(&acquisition.caller_keys),
            fence,
            permit: acquisition.permit_index(),
            lease,
            held: Some(Held {
                shared,
                acquisition,
                watchdog: None,
                pid: std::process::id(),
                since: Instant::now(),
                counted: true,
                audited,
                filed,
            }),
        };
        if watchdog_on {
            if let Some(held) = guard.held.as_mut() {
                let (shared, acquisition) =
                    (Arc::clone(&held.shared), Arc::clone(&held.acquisition));
                let lease = Arc::clone(&guard.lease);
                let key = guard.keys.first().cloned().unwrap_or_default();
                let name = key.clone();
                let stop_at = max_hold.and_then(|hold| time::deadline(Instant::now(), hold));
                let renew = move || {
                    if stop_at.is_some_and(|t| Instant::now() >= t) {
                        log::warn!(
                            target: "redmutex::renew",
                            "lock {key:?} reached its max hold of {:?}: no longer renewed, \
                             it is lost at its deadline",
                            max_hold.unwrap_or_default()
                        );
                        return Renewal::Stopped;
                    }
                    match shared.renew(&lease, &acquisition, fence, None) {
                        Ok(Renewal::Lost) => {
                            lease.log_lost(&key);
                            Renewal::Lost
                        }
                        Ok(renewal) => renewal,
                        Err(e) => {
                            log::warn!(
                                target: "redmutex::renew",
                                "lock {key:?}: renewal failed, retried while the lease lasts: {e}"
                            );
                            Renewal::Failed
                        }
                    }
                };
                let dog = Watchdog::start(Arc::clone(&guard.lease), name, renew)
                    .map_err(Error::Thread)?;
                held.watchdog = Some(dog);
            }
        }
        Ok(guard)
    }

    /// For a permit of a [`Semaphore`](crate::Semaphore): which of its
    /// permits this guard holds, from 0 to the count less one (no two
    /// holders at once hold the same one); `None` for a lock. To share out
    /// work by permit, say.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let permit = locker.semaphore("exports", 4)?.acquire()?;
    /// println!("exporting shard {} of 4", permit.permit().unwrap_or(0));
    /// assert_eq!(locker.lock("report")?.permit(), None);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn permit(&self) -> Option<u32> {
        self.permit
    }

    /// The keys this guard holds, as the caller gave them (without prefix).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let guard = locker.lock_all(&["a", "b"])?;
    /// assert_eq!(guard.keys(), ["a", "b"]);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// The fencing token of this grant: strictly greater than the token of
    /// every earlier grant of the same key by lockers with the same prefix
    /// (multi-key grants included). Send it with every write to the resource
    /// you protect, and have the resource refuse tokens lower than the
    /// highest it has seen: that stops a holder that lost its lease without
    /// knowing it (a long GC pause, a stopped VM).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let guard = locker.lock("ledger")?;
    /// let token = guard.fencing_token();
    /// // UPDATE ledger SET ..., fence = $token WHERE fence < $token
    /// # let _ = token;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.fence
    }

    /// Runs `commands` on the lock's server only if this guard still holds
    /// its lock there: every key of the guard still holds its owner token
    /// (a read hold: and is still counted among the read holds). The check
    /// and the commands run in one script, so nothing can take the lock in
    /// between: a holder paused past its lease (GC, swap, a suspended VM)
    /// that wakes up and writes is refused, where a write after
    /// [`ensure_held`](Guard::ensure_held) would land. Returns every
    /// command's reply, in order. Blocks for two round trips: one to learn
    /// the commands' keys (a script that asks `COMMAND GETKEYS` of each
    /// command and `COMMAND INFO` of their names, and replies once, however
    /// many the commands), then the script, each within the I/O timeout,
    /// after a checkout within its timeout: so at most a checkout and two
    /// I/O timeouts on a hung server, whatever the pipeline's length. When
    /// the script finds the lock gone, one more (with its own checkout and
    /// I/O timeout) reads whether an operator broke it, so that the loss is
    /// told as a break (see [`lost_reason`](Guard::lost_reason)).
    ///
    /// - **Keys.** The commands' keys are asked of the server first (one
    ///   round trip for all of them, on a Cluster too) and declared to the script, as Redis
    ///   wants, so Cluster routing and ACL key rules apply to them: a key an
    ///   ACL user may not touch refuses the whole script (`NOPERM`, as
    ///   [`Error::Redis`]) before any command runs. The question of the
    ///   keys refuses, before anything runs too, an unknown command or one
    ///   with the wrong number of arguments; of a command that names no key
    ///   (`PING`, `PUBLISH`), the arity that `COMMAND INFO` gives, asked in
    ///   the same round trip, tells (a subcommand's too, on Redis 7 and
    ///   later). An ACL user needs `+command|getkeys`, and `+command|info`
    ///   for that arity check (without it the check is skipped, and the
    ///   server refuses such a command when its turn comes). The keys may
    ///   not be the lock's own (its key, its counter, its queue), and no
    ///   command may touch every key (`FLUSHDB`, `FLUSHALL`, `SWAPDB`):
    ///   those are refused before anything runs.
    /// - **Errors of a command.** The commands run in order with
    ///   `redis.pcall`; the first one that replies with an error (a
    ///   `WRONGTYPE`, an `OOM`) stops the run and is the call's error.
    ///   Redis scripts do not roll back: **the commands before it ran and
    ///   stay applied**, the ones after it did not run. The guard is not
    ///   lost for that.
    /// - **Transactions.** The script is atomic: no other client's command
    ///   runs between the check and the last command. A pipeline's
    ///   [`atomic`](redis::Pipeline::atomic) flag changes nothing; the
    ///   replies of commands marked [`ignore`](redis::Pipeline::ignore)
    ///   are left out, as [`query`](redis::Pipeline::query) leaves them. `MULTI`, `EXEC`, blocking and
    ///   other commands a script may not run are refused by the server
    ///   when their turn comes.
    /// - **Replies** come back as a script's do: a status reply as
    ///   [`Value::Okay`](redis::Value::Okay) or a simple string, a RESP3
    ///   map or double as Lua turns it (an array, a string).
    /// - **Cluster.** Every key of the commands must be in the lock key's
    ///   hash slot: give them the same hash tag as the lock's name
    ///   (`{order42}:balance` under a lock named `{order42}`; a
    ///   semaphore's permits and a read-write lock's holds are in their
    ///   name's slot). Else [`Error::InvalidInput`], and nothing runs.
    ///   A Cluster connection sends a request again when its reply is late
    ///   (redis-rs does, after each read timeout): the script marks its run
    ///   (a key beside the slot's fencing counter, for a few seconds), so
    ///   a resend runs nothing, and the commands run once at most, as on
    ///   one server.
    /// - **Redlock**: [`Error::Unsupported`]: no single master holds the
    ///   truth, and no script can run on a majority at once.
    /// - With [`Builder::min_replicas`](crate::Builder::min_replicas), the
    ///   call waits until that many replicas have the writes, as a grant
    ///   does.
    ///
    /// # Errors
    ///
    /// - [`Error::Lost`] when a key of the guard is gone, expired or
    ///   someone else's (or the lease was already lost): **nothing ran**,
    ///   and the guard is lost from then on;
    /// - [`Error::Redis`] with the server's error when a command replied
    ///   with one: the commands before it ran;
    /// - [`Error::InvalidInput`] for an unknown command, a wrong number of
    ///   arguments, a key of the lock's own, a command that touches every
    ///   key or, on a Cluster, a key in another hash slot: nothing ran;
    /// - [`Error::Unsupported`] in Redlock mode;
    /// - [`Error::NotReplicated`] when too few replicas acknowledged (the
    ///   writes ran on the master);
    /// - [`Error::Redis`], [`Error::Pool`] when Redis cannot be reached: a
    ///   call that timed out may still have run.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let guard = locker.lock("{acct:17}")?;
    /// let mut writes = redmutex::redis::pipe();
    /// writes
    ///     .incr("{acct:17}:balance", -30)
    ///     .rpush("{acct:17}:history", "withdraw 30");
    /// // Lands only if the lock is still ours at that moment, paused or not.
    /// let replies = guard.run_if_held(&writes)?;
    /// println!("new balance: {:?}", replies[0]);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn run_if_held(&self, commands: &redis::Pipeline) -> Result<Vec<redis::Value>, Error> {
        let Some(held) = &self.held else {
            return Err(self.lost());
        };
        self.ensure_held()?;
        match held.shared.run_if_held(&held.acquisition, commands)? {
            Some(replies) => Ok(replies),
            None => {
                self.note_lost();
                Err(self.lost())
            }
        }
    }

    /// Sets the lease to `ttl` from now, if the keys are still ours. The
    /// watchdog, if on, renews with this TTL from then on.
    ///
    /// # Errors
    ///
    /// - [`Error::Lost`] when a key is no longer ours (nothing is extended);
    /// - [`Error::InvalidInput`] for a TTL the builder would refuse;
    /// - [`Error::Redis`], [`Error::Pool`] when Redis fails: the lease keeps
    ///   its old deadline.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let guard = locker.lock("migration")?;
    /// guard.extend(Duration::from_secs(600))?; // the slow part
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn extend(&self, ttl: Duration) -> Result<(), Error> {
        let Some(held) = &self.held else {
            return Err(self.lost());
        };
        validate_ttl(ttl, held.shared.config.drift)?;
        let renewal = held
            .shared
            .renew(&self.lease, &held.acquisition, self.fence, Some(ttl));
        // A failure or a loss it found is told now, not at the next renewal.
        self.tell_changes();
        match renewal? {
            Renewal::Confirmed => {
                if let Some(dog) = &held.watchdog {
                    dog.reschedule();
                }
                Ok(())
            }
            Renewal::Lost | Renewal::Failed | Renewal::Stopped => Err(self.lost()),
        }
    }

    /// Releases the lock and reports how it went.
    ///
    /// Stops the watchdog, then deletes every key still owned by this guard;
    /// a key taken over by someone else is left alone. When the keys are
    /// found gone on a lease not known lost, one more round trip reads
    /// whether an operator broke the hold, which the stats then count as
    /// broken ([`Stats::losses_broken`](crate::Stats::losses_broken)).
    ///
    /// # Errors
    ///
    /// - [`Error::Lost`] when the lease was lost at some point (a key was no
    ///   longer ours, or the lease ran out unrenewed): the critical section
    ///   may have overlapped another holder. Keys still ours are deleted
    ///   anyway. Said first, even when the release got no answer.
    /// - [`Error::Redis`], [`Error::Pool`] when Redis fails on a lease not known
    ///   lost: the keys stay until their TTL runs out (the watchdog stops anyway).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let guard = locker.lock("nightly-report")?;
    /// // ... write the report ...
    /// if let Err(redmutex::Error::Lost { .. }) = guard.unlock() {
    ///     eprintln!("another host may have run concurrently: check the output");
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn unlock(mut self) -> Result<(), Error> {
        let Some(mut held) = self.held.take() else {
            return Err(self.lost());
        };
        let released = held.release(&self.lease, self.fence, true);
        if matches!(released, Ok(false)) {
            self.lease.mark_lost();
        }
        // Counted even when the release got no answer (a server still hung).
        let lost = self.lease.is_lost();
        if lost {
            held.count_loss(&self.lease);
        }
        // A loss first: the section may have overlapped another holder.
        lost.then(|| self.lost()).map_or(released.map(drop), Err)
    }

    /// Ends the hold at `at` instead of now: stops the watchdog and sets
    /// the keys still ours to expire at `at`, where Redis deletes them on
    /// its own (no release is announced, and no waiter is handed the lock:
    /// waiters find it free at their next attempt). Meanwhile the lock is
    /// held as before: nobody else gets it. For a job that must not run
    /// again before a given time, even when it ended early (a cron job on a
    /// host whose clock or schedule is a little late). An `at` that is not
    /// at least a millisecond away is a plain [`unlock`](Guard::unlock); one
    /// more than [`MAX_TTL`](crate::MAX_TTL) away is taken as `MAX_TTL`
    /// from now (about 4,400 years).
    ///
    /// # Errors
    ///
    /// As [`unlock`](Guard::unlock): [`Error::Lost`] when the lease was lost
    /// at some point; [`Error::Redis`], [`Error::Pool`] when Redis fails (the
    /// keys then expire at the lease's own TTL).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// use std::time::{Duration, Instant};
    /// let started = Instant::now();
    /// let guard = locker.lock("hourly-sync")?;
    /// // ... a sync that may take a second ...
    /// guard.expire_at(started + Duration::from_secs(60))?; // no second run within the minute
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn expire_at(mut self, at: Instant) -> Result<(), Error> {
        // Redis refuses an expiry past its clock's range: MAX_TTL is forever.
        let left = at
            .saturating_duration_since(Instant::now())
            .min(crate::MAX_TTL);
        if left < Duration::from_millis(1) {
            return self.unlock();
        }
        let Some(mut held) = self.held.take() else {
            return Err(self.lost());
        };
        // Dropping the handle stops the watchdog: no renewal after this.
        drop(held.watchdog.take());
        let kept = if self.lease.is_lost() {
            Ok(Err(None))
        } else {
            held.shared.expire(&held.acquisition, left)
        };
        if let Ok(Err(why)) = &kept {
            held.found_lost(&self.lease, why.clone());
        }
        held.ended(&self.lease, matches!(kept, Ok(Err(_))));
        if kept?.is_err() {
            return Err(self.lost());
        }
        Ok(())
    }

    /// Leaves this guard's hold and loss out of the stats, or puts them back
    /// in: a hand-over taken up before its return whose take-up fails is no
    /// grant. Put back in, it is one: its grant goes to the audit trail then
    /// (with `Builder::audit`), if not yet (a read of the trail puts it in
    /// the server's order).
    pub(crate) fn count_in_stats(&mut self, on: bool) {
        if let Some(held) = self.held.as_mut() {
            held.counted = on;
            held.acquisition.loss_counted.store(!on, Ordering::Relaxed);
            if on && !held.audited {
                held.audited = true;
                held.shared
                    .audit_held(&held.acquisition, self.fence, "grant");
            }
        }
    }

    /// The state behind a guard that is still held and its acquisition
    /// (`None` once released), for an election's leadership.
    pub(crate) fn held_parts(&self) -> Option<(&Arc<RawLock>, &Arc<Acquisition>)> {
        self.held.as_ref().map(|h| (&h.shared, &h.acquisition))
    }

    fn lost(&self) -> Error {
        Error::Lost {
            key: self.keys.first().cloned().unwrap_or_default(),
        }
    }
}

impl Held {
    /// Stops the watchdog (no renewal starts after that, and one in flight
    /// is waited for, so none can race the delete and report a false loss),
    /// deletes the keys still ours, and wakes this locker's waiters.
    /// `Ok(true)` when the keys were still ours (a majority of instances, in
    /// Redlock mode), `Ok(false)` when the lease had been lost. With `ask`,
    /// keys found no longer ours on a lease not known lost cost one more
    /// round trip: whether an operator broke the hold, for the stats.
    fn release(&mut self, lease: &Lease, fence: u64, ask: bool) -> Result<bool, Error> {
        // Dropping the handle stops the watchdog.
        drop(self.watchdog.take());
        let result = self.shared.release(&self.acquisition);
        // Queued before the waiters are woken (a read of the trail puts a
        // hold's events in the server's order anyway).
        if self.audited && matches!(result, Ok((true, _))) {
            self.shared.audit_held(&self.acquisition, fence, "release");
        }
        let handed = result.as_ref().ok().and_then(|(_, h)| h.as_ref());
        self.shared.notify_released(&self.acquisition, handed);
        let lost = matches!(result, Ok((false, _)));
        if lost && ask && !lease.is_lost() {
            self.found_lost(lease, self.shared.why_lost(&self.acquisition));
        }
        self.ended(lease, lost);
        result.map(|(ours, _)| ours)
    }

    /// The stats of a guard's end: its hold time, and its loss when `lost`
    /// (its end found the lease lost) and not counted yet. Only atomics on
    /// the usual path: the lease's own lock is not taken for the stats.
    fn ended(&self, lease: &Lease, lost: bool) {
        if !self.counted {
            return;
        }
        self.shared.stats.ended(&*self.acquisition, self.since);
        if lost {
            self.count_loss(lease);
        }
    }

    /// Counts the loss of this guard's lease, if not counted yet.
    fn count_loss(&self, lease: &Lease) {
        if self.counted {
            self.shared.count_loss(&self.acquisition, lease);
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut held) = self.held.take() {
            if held.pid != std::process::id() {
                // A forked child's copy of its parent's guard: the keys,
                // the watchdog and the connections are the parent's. Leave
                // them alone (a small leak in the child, never a release).
                std::mem::forget(held);
                return;
            }
            // Errors are not returned here (`unlock` returns them): they are
            // logged.
            let key = self.keys.first().map_or("", String::as_str);
            // A drop reads no more than the release (its bound): a break
            // it finds is counted as a key gone.
            match held.release(&self.lease, self.fence, false) {
                Ok(true) => {}
                Ok(false) => log::warn!(
                    target: "redmutex::release",
                    "lock {key:?} had been lost before its guard was dropped"
                ),
                Err(e) => log::warn!(
                    target: "redmutex::release",
                    "lock {key:?}: release on drop failed, the key stays until its TTL: {e}"
                ),
            }
        }
    }
}
