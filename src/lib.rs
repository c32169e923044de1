//! Mutex-like locks for plain threads across machines, on Redis.
//!
//! A blocking call, an RAII guard, and a watchdog thread that keeps the lease
//! alive while the guard lives. No async runtime.
//!
//! # Which type do I use
//!
//! | You want | Use |
//! |---|---|
//! | one holder of a name at a time, across threads, processes and hosts | [`Locker`]: [`lock`](Locker::lock), [`try_lock`](Locker::try_lock), [`lock_all`](Locker::lock_all) for several names at once |
//! | at most N holders of a name at once | [`Semaphore`], from [`Locker::semaphore`] |
//! | many readers of a name at once, or one writer | [`RwLock`], from [`Locker::rwlock`] |
//! | one leader of a name, whom everyone can see and follow | [`Election`], from [`Locker::election`] |
//! | a shell command or cron job under a lock, without writing Rust | the `redmutex` command (crate `redmutex-cli`, Unix) |
//!
//! | Your servers | Build the locker with | Read |
//! |---|---|---|
//! | one Redis or Valkey server (with replicas or not) | [`Locker::open`], or [`Locker::builder`] over [`pool()`] | [Guarantees and limits](#guarantees-and-limits) |
//! | a master watched by Redis Sentinel (automatic failover) | [`Locker::open_sentinel`], or over [`sentinel_pool`] | [Topologies](#topologies-and-what-they-promise): a failover can hand a lock to a second holder; [`Builder::min_replicas`] narrows it |
//! | a Redis Cluster | [`Locker::open_cluster`], or over [`cluster_pool`] | [Topologies](#topologies-and-what-they-promise): keys of one `lock_all` share a hash slot |
//! | several independent masters, trusting no single one (Redlock) | [`Locker::builder`] and [`Builder::instance`] per master | [Redlock](#redlock): a majority decides; no semaphores or read-write locks |
//!
//! # Quick start
//!
//! ```no_run
//! let locker = redmutex::Locker::open("redis://127.0.0.1:6379/")?;
//! let guard = locker.lock("nightly-report")?; // blocks until it is ours
//! // ... one process on one host at a time runs this ...
//! guard.ensure_held()?;                         // still ours? (no round trip)
//! drop(guard);                                  // released here
//! # Ok::<(), redmutex::Error>(())
//! ```
//!
//! A cron job that must not run twice does not wait; it skips:
//!
//! ```no_run
//! # let locker = redmutex::Locker::open("redis://127.0.0.1:6379/")?;
//! let Some(_guard) = locker.try_lock("backup")? else {
//!     return Ok(()); // another host has it
//! };
//! // ... run the backup ...
//! # Ok::<(), redmutex::Error>(())
//! ```
//!
//! # Guarantees and limits
//!
//! What the lock promises, with one Redis server:
//!
//! - **One holder at a time**, as long as Redis keeps its data and its clock.
//!   A lock is a key with a unique, unguessable 128-bit owner token and a
//!   TTL; only the owner extends or deletes it, in Lua scripts that check
//!   the token first.
//! - **The holder is told.** [`Guard::is_lost`] turns true, for good, the
//!   moment the lease can no longer be promised: its local deadline
//!   ([`Guard::valid_until`], counted from when the request was *sent*, minus
//!   a drift allowance) passed without a confirmed renewal, or Redis showed
//!   the key gone or someone else's.
//!   The watchdog renews on a connection the locker keeps aside (pools of 8
//!   or more), and on the pool's idle connections beside it, so an
//!   application that holds every other pooled connection cannot starve
//!   it. Such an application leaves all of a locker's renewals that one
//!   connection, one round trip each: keep the locker's guards times the
//!   round trip below a third of the TTL. (Measured with a pool of 8, a TTL
//!   of 1.5 s and 300 ms timeouts, the rest of the pool held: 3,000 guards
//!   on loopback lost no lease; over a 10 ms round trip, 60 guards lost
//!   none and 100 lost 62 to 75. The pool left idle, 150 and 400 guards over
//!   that link lost none.)
//! - **Fencing tokens.** Every grant carries a number strictly greater than
//!   every earlier grant of the same key ([`Guard::fencing_token`]): each
//!   grant mints `max(counter + 1, server clock in µs)`, so tokens keep
//!   rising across a restart from an older snapshot or AOF, a flush, or a
//!   restart with no data, as long as the server's clock does not go back.
//! - **Nothing hangs.** Every lock attempt, [`Locker::try_lock`],
//!   [`Locker::holder`] and every renewal returns within the checkout
//!   timeout plus the I/O timeout (2 s + 2 s by default); the calls that end
//!   or change a lease ([`Guard::unlock`], dropping a guard,
//!   [`Guard::extend`]) may first wait for a renewal in flight, so within
//!   twice that. [`Locker::lock_timeout`] returns within its wait plus one
//!   attempt, and one more call to leave the queue when the wait ran out
//!   (the first wait of a locker may add the listener's start-up: one more
//!   checkout and I/O timeout). An attempt that fails because the server
//!   did not answer in time returns at once: the waiter's place ends with
//!   its stay. A connection on which a call timed out is not used again until
//!   it answers (a half-open connection costs one timeout, not one per
//!   call).
//!
//! These are tested under faults (killed, frozen and starved holders, a
//! frozen server, tampered keys, cut and stalled connections) by a suite
//! that records every critical section of several processes and checks the
//! history. The figures of its last long run are in [`reliability`]
//! (`RELIABILITY.md` at the top of the repository).
//!
//! Replicated and multi-master setups are covered under "Topologies and
//! what they promise" below. What no setup can promise, and what to do about
//! it:
//!
//! - **Pauses.** A holder frozen (GC, swap, `SIGSTOP`, a suspended VM) past
//!   its deadline wakes up still believing in a lease that another holder now
//!   has. Only the protected resource can stop its writes, and the crate
//!   does it for you: writes to the lock's own Redis go through
//!   [`Guard::run_if_held`], which runs them only while the lock is still
//!   the guard's, in one script; another Redis admits a write by its
//!   [fencing token](Guard::fencing_token) with [`fence::admit_and_run`];
//!   a SQL database keeps the token in the row (`UPDATE ... WHERE fence <=
//!   ?`, see [`fence`] and `examples/fence_sqlite.rs`).
//! - **Failover.** Redis replicates asynchronously; a replica promoted after a
//!   crash may not have the lock, and hands it to a second holder.
//! - **Memory.** Run locks on a server with `maxmemory-policy noeviction`
//!   (or no `maxmemory`). An evicting policy can evict a held lock at any
//!   moment (`volatile-ttl` evicts lock keys first); the holder learns it at
//!   its next renewal, as after a `DEL`, but another client may take the
//!   lock before that. The crate does not refuse such a server: it cannot
//!   read the policy without rights most managed services withhold.
//! - **Clocks.** Redis expires keys by wall-clock time; a server clock jump
//!   expires a lock early. Lost data (`FLUSHALL`, a restart from an older
//!   snapshot or without persistence) loses the locks it held; fencing
//!   tokens still rise, because they follow the server's clock, unless that
//!   clock went back. After a failover the new master's clock takes over:
//!   tokens keep rising if the servers' clocks agree to within the time the
//!   failover takes (NTP keeps them far closer).
//!
//! # Held, in doubt, lost
//!
//! Between held and lost a lease has a third state, [`LeaseState::InDoubt`]:
//! its last renewal failed (an error, a timeout) or is overdue (none
//! confirmed by half the granted TTL after the last confirmed request was
//! sent, a sixth of the TTL after it was due), and its deadline has not
//! passed. The lease may well be intact, but Redis has not said so lately:
//! it may have restarted without the key, or failed over to a replica that
//! never had it, and another client may hold the lock already. A renewal
//! confirmed before the deadline makes it [`LeaseState::Held`] again (a log
//! event at `info`); else it is [`LeaseState::Lost`] at the deadline, for
//! good. [`Guard::state`] reads it, [`Guard::wait_state_change`] waits for
//! it to change, and [`Builder::on_lease_change`] is told each change, on
//! the watchdog thread.
//!
//! Two gates, both without a round trip: [`Guard::ensure_held`] fails only
//! once the lease is lost, and suits a step that is safe while the deadline
//! (counted from a confirmed request) has not passed; [`Guard::ensure_confirmed`]
//! also fails while in doubt ([`Error::InDoubt`]), for a writer that would
//! rather pause a renewal or two than write while the lock may be someone
//! else's (as Curator's `SUSPENDED` and Kubernetes' leader gating do).
//!
//! ```no_run
//! # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
//! use redmutex::{Error, LeaseState};
//! use std::time::Duration;
//! let guard = locker.lock("ledger")?;
//! for entry in 0..1000 {
//!     while let Err(Error::InDoubt { .. }) = guard.ensure_confirmed() {
//!         // Paused: the next renewal decides.
//!         guard.wait_state_change(LeaseState::InDoubt, Duration::from_secs(1));
//!     }
//!     guard.ensure_held()?;
//!     println!("entry {entry} under token {}", guard.fencing_token());
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Threads
//!
//! [`Locker`] is `Clone + Send + Sync`: clone it into every thread. [`Guard`]
//! is `Send + Sync`: it can be released on another thread, and `&Guard` can
//! be shared. While a guard lives, one watchdog thread renews its lease
//! (turn it off with [`Builder::watchdog`]). The thread is taken when the
//! first renewal is due, a third of the TTL after the grant, from a pool of
//! parked workers shared by the process; until then one starter thread per
//! process keeps the guard's start time. So taking a lock spawns no thread
//! once one is parked, and a guard gone before its first renewal wakes no
//! thread at all. A process holding 10,000 guards past their first renewal
//! runs 10,000 watchdog threads, each with a 128 KiB stack of which a few
//! pages are touched ([`watchdog_threads`] counts them). A locker whose
//! waiters wait also keeps one listener thread with one pooled connection.
//! [`Locker::open`] checks the password on a short-lived thread of its own.
//!
//! **Forked processes** (pre-forking servers, job runners) take locks of
//! their own: a child gets its own owner tokens, starter and watchdog
//! workers, even when its parent used watchdogs before the fork. A child
//! opens its own pool and [`Locker`]: the pools, lockers and guards it
//! inherited are the parent's (their connections are shared with the
//! parent, their threads exist only there), so it must not use them, and
//! should end with [`std::process::exit`] rather than drop them. A guard
//! dropped in a process other than the one that took its lock does
//! nothing (no release, its watchdog left alone): a child that drops the
//! guards it inherited leaves its parent's locks held. Fork
//! while no other thread is inside a call of this crate, and with no r2d2
//! pool open: r2d2's scheduler threads wait in `parking_lot`, whose list
//! of waiting threads a fork leaves naming the parent's threads, whose
//! stacks the child's new threads reuse (with the parent's pool still
//! open, children crashed inside `parking_lot_core` or lost their lock in
//! about 1 run in 8). A pool built with `idle_timeout(None)` and
//! `max_lifetime(None)` ends its threads as soon as it is dropped.
//!
//! # Dropping a guard
//!
//! Dropping a guard stops its watchdog (no renewal starts after that; one
//! in flight is waited for), then deletes the keys that are still its own
//! and announces the release. Another owner's key is never touched. It never
//! panics and blocks for at most two checkouts and two I/O timeouts. A panic
//! in the critical section unwinds through the guard and releases the lock
//! (no poisoning). [`Guard::unlock`] is the checked release.
//!
//! # Waiting
//!
//! [`Locker::lock`] waits without polling where it can:
//!
//! - **Handed over on release.** Waiters on a single key queue in Redis,
//!   first come, first served. A release gives the lock to the longest
//!   live waiter inside the release script (with that waiter's TTL and
//!   metadata, and a new fencing token) and announces it on the prefix's
//!   release channel; a release with nobody queued announces the free key.
//!   A locker's first waiter starts a listener (one thread, one connection
//!   lent by the pool for the locker's life) that hands the news to its
//!   waiters, in this process and every other; a release by a guard of the
//!   same locker tells them directly. The waiter holds the lock without a
//!   round trip of its own, its lease counted from its last attempt.
//! - **A hand-over is a claim.** The release sets the lock for the
//!   waiter's *stay* (its longest backoff pause, at most 1 s, plus its
//!   checkout and I/O timeouts, at most 2 s: 2.3 s with the defaults, 3 s
//!   at most whatever the settings) when that is shorter than its TTL; the
//!   waiter takes it up to its TTL with one renewal before `lock` returns
//!   (when that renewal comes too late for the claim, the waiter frees it
//!   and waits on; when it fails, `lock` returns its error and frees the
//!   claim), so the guard it gets has a full lease, as after any other
//!   grant. So a waiter
//!   killed while queued keeps the lock from the others for at most its
//!   stay, never its TTL.
//! - **Fairness.** A thread that releases and locks again at once queues
//!   behind the others. A waiter that dies holds its place only until its
//!   deadline (its stay). A live waiter whose backoff pauses longer than
//!   1 s calls the server every second meanwhile, to keep its place (such
//!   a call takes the lock if it is free, and is not counted as an
//!   attempt); one whose next call is held up longer than its stay (a pool
//!   the application keeps busy, a stalled server) queues again at the
//!   back. A waiter that gives up, or whose attempt fails
//!   with an error other than a timeout, leaves the queue and frees a
//!   lock handed to it meanwhile. [`Locker::try_lock`] respects the queue.
//! - **A safety net.** Between attempts a waiter also keeps its [`Backoff`]
//!   (exponential, 8 to 256 ms, by default) and retries when the holder's
//!   lease would have run out, so a lost message costs one backoff pause,
//!   never a hang.
//!
//! Where this cannot be used, waiters poll with their backoff: on a
//! Cluster, in Redlock mode, with pools of fewer than four connections (the
//! listener needs one of its own), and for a Redis ACL user without rights
//! on the release channel (the listener's `SUBSCRIBE` is refused: it says
//! so once in a `warn` log line, target `redmutex::listen`, and the
//! releases still work, unannounced). Multi-key locks are woken on release
//! but do not queue. The README lists the ACL rules a locker needs.
//!
//! # Redlock
//!
//! With several independent masters ([`Builder::instance`]), every
//! operation goes to all of them in parallel and a majority decides:
//!
//! - a lock is granted when N/2 + 1 instances took it (every key of it)
//!   within its validity: `ttl - elapsed - drift`, with `elapsed` counted
//!   from when the first request was sent and `drift` 1 % of the TTL plus
//!   2 ms by default ([`Builder::drift`]), and no instance that answered
//!   holds it for someone else: the grant then takes the free instances too
//!   (a hold on a bare majority would fall to one instance's data loss), and
//!   is given up when a rival keeps one;
//! - each instance's call is bounded by a timeout of at most a tenth of the
//!   TTL, so a dead or hung instance costs that and no more, and an
//!   operation takes as long as the slowest member of the quorum;
//! - a guard's release that cannot reach an instance (it hangs, or was
//!   skipped after a failure) is sent again, owner-checked, by a thread of
//!   the locker (which keeps the locker's pools that long): 100 ms later,
//!   then after 200 ms, 400 ms, ... up to every second until that instance
//!   answers, for at most the TTL. An instance that hangs for a moment
//!   across an unlock costs the next lock about that moment, not the rest
//!   of the TTL of the key left there (if the process exits first, that key
//!   waits out its TTL). Where a renewal (or the write-back) timed out, it
//!   may still arrive after the release and put our key back (a renewal
//!   repairs a missing key): there the release is sent again after each
//!   pause, answered or not, for four TTLs;
//! - a failed attempt is released on every instance, including those that
//!   seemed to fail, so no partial hold outlives the call;
//!   [`Error::NoQuorum`] says how many granted and carries the last error.
//!   Each attempt has an owner token of its own, so a clean-up that reaches
//!   an instance late (queued behind an acquire on a stalled connection)
//!   never deletes a later attempt's grant, and the write-back goes only to
//!   the instances that answered the attempt;
//! - renewals, [`Guard::extend`], [`Guard::unlock`] and [`Locker::holder`]
//!   decide on the majority too. A renewal puts back a key of ours that an
//!   instance lost (its data flushed or restored), with our value and the
//!   TTL, and counts that instance only then; an instance where someone
//!   else holds the key refuses. The guard is lost the moment a majority
//!   refuses, so a majority that erodes one instance at a time is repaired
//!   between losses, or reported;
//! - the largest fencing token minted by the granting instances is written
//!   back to the instances before the guard is returned, so any later
//!   majority overlaps an instance that counts above it: tokens keep rising
//!   as long as no instance loses its data. Each attempt proposes a token
//!   (this machine's clock, a second ahead, or half the TTL when shorter)
//!   that the instances mint when their counters are below it, and only up
//!   to their own clock plus 2 s (the TTL when shorter): a client clock
//!   that runs fast pushes no counter further. When every instance granted
//!   with that one token, they already are as the write-back would leave
//!   them, and it is skipped: on healthy masters a lock and an unlock are
//!   two round trips, as on one server. The calls to the other instances run on threads the
//!   locker keeps (per instance, one for each call under way at once).
//!
//! Two instances that lose their data within one renewal interval (a third
//! of the TTL) can still let another client find a majority while a lock is
//! held; the holder is then told at its next renewal. Restart instances no
//! sooner than the longest TTL after a crash, or run them with
//! `appendfsync always`. Fencing tokens follow each server's clock, so they
//! keep rising across such restarts unless a clock went back: a proposal
//! leads an instance's own clock by 2 s (or the TTL) at most, whatever the
//! client's clock says, so a restart without data no sooner than the
//! longest TTL after the crash (as above) finds every token behind it.
//!
//! # Topologies and what they promise
//!
//! | Topology | Built from | One holder at a time as long as | Fencing tokens |
//! |---|---|---|---|
//! | One server | `Pool<redis::Client>` | the server keeps its data and its clock does not jump | strictly rising per key (one counter per prefix), across restarts and restores, while the server clock does not go back |
//! | One server, [`Builder::min_replicas`] | the same | as above; a failover keeps the lock if an acknowledging replica is promoted (grants and renewals count only once acknowledged, so a stalled replica costs the holder its lease, and it is told) | as above |
//! | Sentinel | `Pool<redis::sentinel::LockedSentinelClient>` | no failover happens while a lock is held: replication is asynchronous, and a promoted replica that missed the lock (or an old master that still takes writes until it is demoted) hands it to a second holder; the first is told once its renewals reach the new master, which can be only when the old one is demoted (use [`Builder::min_replicas`]; `RELIABILITY.md` measures both) | strictly rising, across failovers too, as long as the new master's clock is not behind the old one's by more than the failover took |
//! | Cluster | `Pool<redis::cluster::ClusterClient>` | as Sentinel, per shard; keys of one `lock_all` share a hash slot (use hash tags: `{order42}:a`, `{order42}:b`) | strictly rising per key (one counter per prefix and slot); tokens of keys in different slots are not comparable |
//! | Redlock, N masters | [`Builder::instance`] | no two instances lose their data within one renewal interval (see above), clocks drift less than the allowance, and no holder pauses past its lease | strictly rising per key while the instances' clocks do not go back |
//!
//! Every topology shares the limits of any lease-based lock: a holder that
//! pauses past its lease is not stopped by the lock itself. The protected
//! resource must check: [`Guard::run_if_held`] (one server or a Cluster;
//! not Redlock, where no single master holds the truth) or [`fence`].
//!
//! # Semaphores
//!
//! [`Locker::semaphore`] gives a [`Semaphore`]: at most N holders of a name
//! at once, each permit a [`Guard`] with everything above (watchdog, loss
//! told, fencing token). A permit is kept as a lock key of its own, so the
//! guarantees and limits of a lock hold for each permit, and at most N
//! holders hold at once because there are only N permits. Not on Redlock.
//!
//! # Read-write locks
//!
//! [`Locker::rwlock`] gives a [`RwLock`]: many readers of a name at once,
//! or one writer. Each hold, read or write, is a [`Guard`] with everything
//! above, kept as a key of its own, and its fencing token rises with every
//! grant of the name. Writers come first: a queued writer stops the
//! readers who arrive after it, and its release lets in every reader
//! queued before the next writer. Not on Redlock.
//!
//! # Leader election
//!
//! [`Locker::election`] gives an [`Election`]: one leader of a name at a
//! time, with a value (its address, say) everyone can read
//! ([`Election::leader`]) and follow ([`Election::observe`]), and a term,
//! its fencing token, that rises with every new leader. A leadership is a
//! [`Guard`] on the election's key (so everything above holds for it) with
//! [`proclaim`](Leadership::proclaim) and [`resign`](Leadership::resign);
//! candidates queue first come, first served, a resignation hands over at
//! once, and a dead leader is replaced when its lease runs out. Each change
//! is logged, by the script that makes it, in a capped stream beside the
//! election's key, which observers read with a blocking `XREAD` (see
//! [`Observer`] for what "every change, in order" means). Not on Redlock.
//!
//! # Differences from `std::sync::Mutex`
//!
//! - A lock is named by a string, not tied to data; it protects whatever its
//!   users agree it protects.
//! - A lease can be lost while the guard is alive (see above): check
//!   [`Guard::ensure_held`], and write through [`Guard::run_if_held`] or
//!   [`fence`].
//! - No poisoning: a panic releases the lock.
//! - Not reentrant: a second `try_lock` of a key this locker holds returns
//!   `None`, and a second `lock` waits (until the acquire timeout).
//! - Locking can fail: every call returns a `Result`.
//!
//! # Connections
//!
//! [`pool()`] builds an r2d2 pool with what a lock needs: socket timeouts on
//! every connection from the moment it is made, no `PING` at checkout, and
//! a bounded checkout. A pool built with r2d2's defaults works too, but pays
//! a `PING` round trip on every operation, and its connections have no read
//! timeout until this crate first uses them (it sets one then).
//! [`sentinel_pool`] and [`cluster_pool`] do the same for Sentinel and
//! Cluster. The [`redis`] and [`r2d2`] crates are re-exported, so a pool of
//! your own needs no matching versions of them.
//!
//! A URL that cannot work is [`Error::InvalidUrl`], saying which part is
//! wrong; [`Locker::open`] connects once to check the password, so a
//! refused or missing one is [`Error::Auth`] at once (and a database the
//! server lacks [`Error::InvalidUrl`]), waiting at most the I/O timeout.
//!
//! # Servers and TLS
//!
//! Redis from [`MIN_REDIS_VERSION`] (6.2) on and every Valkey release, with
//! Lua scripting on. A locker reads the server's version before its first
//! acquisition there (`INFO server`) and says [`Error::Unsupported`] then
//! to an older server, and on any call to one (or as an ACL user) that
//! cannot run its scripts.
//!
//! The `tls` cargo feature turns on redis-rs's rustls TLS: `rediss://` URLs
//! trusting the system's root certificates, or your own authority through
//! `redis::Client::build_with_tls` and [`pool_with`]:
//!
//! ```no_run
//! # #[cfg(feature = "tls")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = redis::Client::build_with_tls(
//!     "rediss://redis.internal:6380/",
//!     redis::TlsCertificates {
//!         client_tls: None,
//!         root_cert: Some(std::fs::read("ca.pem")?),
//!     },
//! )?;
//! let locker = redmutex::Locker::new(redmutex::pool_with(client));
//! # let _ = locker;
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "tls"))]
//! # fn main() {}
//! ```

//!
//! # Live figures
//!
//! [`Locker::stats`] returns a locker's counts (grants, hand-overs, busy
//! answers, timeouts, losses by reason, failed renewals) and its wait and
//! hold times (p50, p99, max), shared by its clones and the semaphores and
//! read-write locks made from them; recording them costs relaxed atomic
//! adds and no lock ([`Builder::stats`] turns it off).
//! [`Locker::reset_stats`] returns them and starts again from zero. See
//! [`Stats`] for what each counts and how to export them to a metrics
//! system.
//!
//! ```no_run
//! # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
//! let s = locker.stats();
//! println!("{} grants, {} busy, wait p99 {:?}", s.grants(), s.busy(), s.wait().p99());
//! # Ok::<(), redmutex::Error>(())
//! ```
//!
//! # Logging
//!
//! Events go to the [`log`](https://docs.rs/log) facade (install any
//! logger to see them). None carries an owner token.
//!
//! | Target | Level | When |
//! |---|---|---|
//! | `redmutex::lease` | `error` | a guard's lease is lost, and why (its deadline passed unrenewed, Redis showed the key gone or someone else's, or an operator broke it: "broken by an operator: \<reason\>"); a [`Builder::on_lease_change`] callback panicked (the watchdog goes on) |
//! | `redmutex::lease` | `warn` | a guard's lease is in doubt: a renewal failed, or none was confirmed in time |
//! | `redmutex::lease` | `info` | a lease in doubt is held again: a renewal was confirmed |
//! | `redmutex::renew` | `warn` | a renewal failed (it is retried while the lease lasts), or a guard reached its [`Builder::max_hold`] |
//! | `redmutex::break` | `warn` | an operator broke a hold ([`Locker::break_lock`]): which, whose, and why |
//! | `redmutex::audit` | `warn` | an event could not be written to the audit trail (the lock operation went on) |
//! | `redmutex::release` | `warn` | a release on drop failed (the key stays until its TTL), or found the lock already lost |
//! | `redmutex::acquire` | `debug` | a lock acquired or handed over after waiting, with the attempts and the time taken |
//! | `redmutex::listen` | `warn` | the release listener could not start (tried again later), or the server refused its `SUBSCRIBE` (ACL): waiters poll |
//! | `redmutex::listen` | `info` | the pool lends no connection to a release listener (a cluster, a small pool): waiters poll |
//! | `redmutex::listen` | `debug` | the release listener started, or stopped with its connection |
//! | `redmutex::observe` | `warn` | an election's [`Observer`] fell more than 128 changes behind the log: some may be skipped |
//!
//! # Platforms
//!
//! The library is plain `std` with no platform-specific code of its own:
//! it is built and tested on Linux, and its dependencies (redis-rs, r2d2,
//! getrandom, parking_lot; ring with the `tls` feature, which needs a C
//! compiler) support macOS and Windows; `unix://` URLs work only on Unix.
//! The default [`Builder::metadata`] names the host from Linux's
//! `/proc/sys/kernel/hostname` or `/etc/hostname`, else the `HOSTNAME` or
//! `COMPUTERNAME` (Windows) variable, else `uname -n` (macOS, the BSDs),
//! looked up once per process. The `redmutex` command is Unix-only.

// The crate's layout, one line per home (API apart from mechanism):
//
// lib.rs              crate docs, modules, re-exports; no logic
// locker.rs           `Locker`: the API
//   locker/acquire.rs one attempt, the acquire loop (wait, queue, hand-over), a grant's guard
//   locker/stats.rs   `Locker::stats` and `reset_stats`
// semaphore.rs        `Semaphore`: N holders of a name, each hold a `Guard` over one permit key
// rwlock.rs           `RwLock`: readers or one writer of a name, each hold a `Guard` over its key
// election.rs         `Election`: one leader of a name, `Leadership` (a `Guard` over its key),
//                     `Observer` (the log of changes followed)
// guard.rs            `Guard`: a held lock, its lease API, release on drop
// info.rs             `LockInfo`, what `Locker::holder` and `locks` report; `LockKind`;
//                     `AuditEntry`, one event of the audit trail; `Leader`, an election's
// operate.rs          `Locker::locks`, `break_lock`, `audit`: what an operator does
// stats/              a locker's live figures:
//   mod.rs            `Stats` and `Durations`, what callers read
//   recorder.rs       the recorder: atomic counters, log-scale histograms; no lock
// fence.rs            `fence`: a resource that admits fencing tokens (any Redis connection)
// builder.rs          `Builder`: checks the settings and builds a `Locker` (above it)
//   builder/host.rs   the default metadata: host name and pid
// config.rs           the frozen `Config`, the `Topology` decided once, the duration checks
// defaults.rs         every default and limit (`DEFAULT_*`, `MAX_TTL`, ...); imports nothing
// error.rs            `Error`, with `is_timeout` / `is_connection`
// open.rs             URLs checked and told in words, the password check of `open`,
//                     the Sentinel and Cluster pools
// backoff.rs          `Backoff`, retry delays as pure functions
// raw/                the mechanism, on every instance (asked in parallel), decided by quorum.rs:
//   mod.rs            `RawLock`, a call on one instance, the acquisition and its attempt
//   mutex.rs          a lock's keys, and who holds one
//   permits.rs        a semaphore's permit keys, how many are free, the permit granted
//   rw.rs             a read-write lock's read and write holds
//   election.rs       an election's keys, its candidates, its log (announce, proclaim, observe)
//   renew.rs          a granted hold's renewal, and its expiry
//   release.rs        a granted hold's release, and the waiters it wakes here
//   guarded.rs        a granted hold's guarded write: commands run only while it holds
//   redlock.rs        Redlock only: the proposal, the write-back, the breaker, the fan-out
//   later.rs          Redlock: releases sent again to a master that missed them
//   audit.rs          the audit trail's events, written in order by a thread of their own
//   operate.rs        the SCAN walk of a listing, a hold read or broken, the audit trail
//   model_vs_redis.rs (test) the model walked against the real scripts
// quorum.rs           every majority decision, pure
// conn/
//   mod.rs            the type-erased connector, the spare renewal connection, the
//                     connection lent to the listener
//   pool.rs           `pool()`, `pool_with()`, `SocketTimeouts`
// server.rs           what a server must offer (version, scripting), told at first use
// protocol/           what is kept in Redis and said to it:
//   keys.rs           the key layout (lock, counter, queue, waiters, marks, audit, channel)
//                     and key checks
//   named.rs          the holds a listing names, and the names it gives them
//   scripts.rs        every Lua script's handle (EVALSHA, NOSCRIPT -> EVAL) and typed caller
//   lua/*.lua         every Lua script, opening with its KEYS/ARGV contract and replies
//   lua/lib/*.lua     the helpers scripts share, put before them at compile time
//   replies.rs        every script reply parsed; the lock value built and parsed
//   slots.rs          cluster hash slots and hash tags
//   commands.rs       a caller's commands for a script: their args, their keys (COMMAND
//                     GETKEYS), the script's replies read back
// lease/              a lease and what keeps it:
//   mod.rs            `Lease`, the local view (deadline, state, renewal serialized)
//   state.rs          `LeaseState`, `LeaseChange`, the callback, the lease's changes of state
//   watchdog.rs       the watchdog that renews a guard's lease
//   workers.rs        the process-wide parked threads watchdogs run on
// wake/               waking waiters on a release:
//   listener.rs       the release listener: states, thread, callback, message format
//   waiters.rs        the in-process registry of waiters it wakes
// token.rs            owner tokens (never printed)
// time.rs             duration arithmetic
// sync.rs             lock and channel shims: parking_lot/std, or loom under `--cfg loom`
//
// Layers: a file imports its own layer or lower ones, never a higher one
// (`.ci/layers.py` lists each file's imports and flags any that run upward):
//
// 1 leaves      defaults, time, token, sync, error, info, stats: constants, arithmetic,
//               plain types; `defaults`, `sync` and `stats` import nothing of the crate
// 2 mechanism   config, backoff, quorum, protocol/, conn, open, server, lease/, wake/,
//               raw/: what is said to Redis and decided from its replies; reads the
//               leaves and the frozen `Config`, never a handle or the builder
// 3 held        guard: a held lock over raw/ and lease/
// 4 API         locker, semaphore, rwlock, operate, election: the handles (they build each
//               other's guards); fence: the fencing helpers (over protocol/ alone)
// 5 entry       builder: builds a `Locker` from the defaults and the settings given
// 6 root        lib.rs: docs and re-exports only
//
// One import still runs upward, for a stated reason: `Locker::new` and
// `Locker::builder` return a `Builder` (the API's entry point, as r2d2's
// `Pool::builder`). A server's refusal (`auth_reason`, `handshake_unknown`,
// `database_refused`) is read in error.rs, where its errors become ours.

mod backoff;
mod builder;
mod config;
mod conn;
mod defaults;
mod election;
mod error;
pub mod fence;
mod guard;
mod info;
mod lease;
mod locker;
mod open;
mod operate;
mod protocol;
mod quorum;
mod raw;
mod rwlock;
mod semaphore;
mod server;
mod stats;
mod sync;
mod time;
mod token;
mod wake;

pub use backoff::Backoff;
pub use builder::Builder;
pub use conn::{pool, pool_with, SocketTimeouts};
pub use defaults::{
    DEFAULT_CHECKOUT_TIMEOUT, DEFAULT_IO_TIMEOUT, DEFAULT_POOL_SIZE, DEFAULT_REPLICA_TIMEOUT,
    DEFAULT_TTL, MAX_TTL,
};
pub use election::{Election, Leadership, Observer};
pub use error::Error;
pub use guard::Guard;
pub use info::{AuditEntry, Leader, LockInfo, LockKind};
pub use lease::state::{LeaseChange, LeaseChangeReason, LeaseState};
pub use lease::workers::{watchdog_threads, WatchdogThreads};
pub use locker::Locker;
pub use open::{cluster_pool, sentinel_pool};
pub use rwlock::RwLock;
pub use semaphore::{Semaphore, MAX_PERMITS};
pub use server::MIN_REDIS_VERSION;
pub use stats::{Durations, Stats};

/// The redis-rs crate this one is built on, for its types in this API
/// (`redis::Client`, `redis::cluster::ClusterClient`,
/// `redis::sentinel::LockedSentinelClient`, `redis::RedisError`) without a
/// matching `redis` dependency of your own.
///
/// ```no_run
/// let client = redmutex::redis::Client::open("redis://127.0.0.1/")?;
/// let locker = redmutex::Locker::new(redmutex::pool_with(client));
/// # let _ = locker;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub use redis;

/// The r2d2 crate whose pools a locker takes, for `r2d2::Pool::builder()`
/// without a matching `r2d2` dependency of your own.
///
/// ```no_run
/// use redmutex::{r2d2, redis};
/// let pool = r2d2::Pool::builder()
///     .max_size(32)
///     .test_on_check_out(false)
///     .connection_customizer(Box::new(redmutex::SocketTimeouts::new(
///         std::time::Duration::from_secs(1),
///     )))
///     .build(redis::Client::open("redis://127.0.0.1/")?)?;
/// let locker = redmutex::Locker::new(pool);
/// # let _ = locker;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub use r2d2;

/// The README's Rust examples, compiled as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#[doc = include_str!("../RELIABILITY.md")]
pub mod reliability {}
