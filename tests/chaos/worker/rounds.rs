//! A worker's rounds: its threads, each locking, recording and unlocking
//! in a loop, and the starving round the coordinator asks for.

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{
    Extras, Held, Lock, Recorder, Resource, Settings, FAST_KEYS, FAST_THREADS, RW_NAME, SEM_NAME,
    SLOW_KEY,
};
use crate::history::{line, lock_of, now_ns, Op, READ_SUFFIX};

/// The worker's threads, and the coordinator's commands, until its
/// standard input ends. `pools`: the ones a starving round takes.
pub(super) fn work(
    settings: &Settings,
    rec: Arc<Recorder>,
    lock: Arc<dyn Lock>,
    extras: Option<Extras>,
    pools: &[r2d2::Pool<redis::Client>],
) {
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    // A starving round also takes read holds of the read-write lock.
    let readers = extras.as_ref().map(|e| Arc::clone(&e.rw));
    if let Some(extras) = extras {
        let read = format!("{RW_NAME}{READ_SUFFIX}");
        // The permit thread; the read-write thread reads twice as often
        // as it writes.
        for (name, lock, seed) in [
            ("worker-permits", extras.permits, 0xff),
            ("worker-rw", extras.rw, 0xfe),
        ] {
            let (rec, stop, settings) = (Arc::clone(&rec), Arc::clone(&stop), settings.clone());
            let read = read.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(name.into())
                    .spawn(move || {
                        let mut res = Resource::open(&settings.resource_url);
                        let mut rng = Rng::new(u64::from(settings.id) << 8 | seed);
                        while !stop.load(Ordering::SeqCst) {
                            let hold = Duration::from_millis(1 + rng.below(3));
                            let key = match (seed, rng.below(3)) {
                                (0xff, _) => SEM_NAME,
                                (_, 0) => RW_NAME,
                                _ => read.as_str(),
                            };
                            section(&*lock, &rec, &mut res, key, hold);
                        }
                    })
                    .expect("spawn a thread"),
            );
        }
    }
    // The linearizability workloads, where the scenario runs them.
    super::linear::spawn(settings, &rec, &lock, &stop, &mut threads);
    for n in 0..=FAST_THREADS {
        let (lock, rec, stop, settings) = (
            Arc::clone(&lock),
            Arc::clone(&rec),
            Arc::clone(&stop),
            settings.clone(),
        );
        let slow = n == FAST_THREADS;
        threads.push(
            std::thread::Builder::new()
                .name(format!("worker-{n}"))
                .spawn(move || {
                    let mut res = Resource::open(&settings.resource_url);
                    let mut rng = Rng::new(u64::from(settings.id) << 8 | n as u64);
                    while !stop.load(Ordering::SeqCst) {
                        let (key, hold) = if slow {
                            let ttl = settings.ttl.as_millis() as u64;
                            // A broken locker holds longer, so that a
                            // tamper finds its holder with time to be told.
                            let hold = if settings.flaw.is_some() {
                                2 * ttl + rng.below(ttl)
                            } else {
                                ttl / 2 + rng.below(ttl)
                            };
                            (SLOW_KEY, hold)
                        } else {
                            let k = FAST_KEYS[rng.below(FAST_KEYS.len() as u64) as usize];
                            (k, 1 + rng.below(3))
                        };
                        section(&*lock, &rec, &mut res, key, Duration::from_millis(hold));
                    }
                })
                .expect("spawn a worker thread"),
        );
    }

    // Commands from the coordinator until our standard input ends.
    for cmd in std::io::stdin().lock().lines().map_while(Result::ok) {
        if cmd == "starve" {
            let mut res = Resource::open(&settings.resource_url);
            let pool = pools.first().expect("a pool");
            starving_round(
                &*lock,
                readers.as_deref(),
                &rec,
                &mut res,
                settings.ttl * 3,
                pool,
            );
        }
    }
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        let _ = t.join();
    }
    drop(lock);
    // Every guard is gone: no watchdog may still be renewing.
    let give_up = Instant::now() + Duration::from_secs(5);
    let alive = || {
        let t = redmutex::watchdog_threads();
        t.running + t.pending
    };
    while alive() > 0 && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(10));
    }
    rec.put(&line::end(now_ns(), alive()));
}

/// A lock held in a section: its guard, the key its section is recorded
/// under, and the section's fenced read.
pub(super) struct Taken {
    pub(super) held: Box<dyn Held>,
    pub(super) key: String,
    pub(super) token: u64,
    get: Op,
    value: i64,
}

/// Lock, record the entry, the fenced read.
pub(super) fn take(
    lock: &dyn Lock,
    rec: &Recorder,
    res: &mut Resource,
    key: &str,
    wait: Duration,
) -> Option<Taken> {
    let asked = now_ns();
    let held = match lock.lock(key, wait) {
        Ok(h) => h,
        Err(kind) => {
            rec.put(&line::failed(now_ns(), &kind, key, asked));
            std::thread::sleep(Duration::from_millis(5));
            return None;
        }
    };
    let token = held.token();
    let key = held.key(key);
    rec.put(&line::enter(&key, token, now_ns(), asked));
    let (get, value) = res.call(lock_of(&key), token, "get");
    if get == Op::Ok {
        rec.put(&line::read(&key, token, now_ns()));
    }
    Some(Taken {
        held,
        key,
        token,
        get,
        value,
    })
}

/// The fenced write (a read hold never writes), record the exit, unlock,
/// record what `unlock` said.
pub(super) fn leave(t: Taken, rec: &Recorder, res: &mut Resource) {
    let Taken {
        held,
        key,
        token,
        get,
        value,
    } = t;
    let set_start = now_ns();
    let set = if get == Op::Ok && !key.ends_with(READ_SUFFIX) {
        res.call(lock_of(&key), token, &(value + 1).to_string()).0
    } else {
        Op::Skipped
    };
    let t = now_ns();
    let lost = held.is_lost();
    rec.put(&line::exit(&key, token, t, get, set, set_start, lost));
    let u = held.unlock();
    rec.put(&line::unlock(&key, token, now_ns(), u));
}

/// One round: lock, the critical section, unlock, each recorded.
fn section(lock: &dyn Lock, rec: &Recorder, res: &mut Resource, key: &str, hold: Duration) {
    let Some(t) = take(lock, rec, res, key, Duration::from_secs(3)) else {
        return;
    };
    if t.held.wait_lost(hold) {
        rec.put(&line::lost(&t.key, t.token, now_ns()));
    }
    leave(t, rec, res);
}

/// How many read holds a starving round takes, one after the other, where
/// the worker has the read-write lock: with the four locks, ten leases
/// whose renewals fall due within a few milliseconds of each other.
const STARVING_READS: usize = 6;

/// A starving round: the slow key, every fast key and read holds of the
/// read-write lock held at once (leases renewing together), while the
/// application's other thread takes every connection of `pool` as each
/// comes free, for a while; this one keeps listening to its guards
/// meanwhile, so that a loss is recorded when a guard tells it. (One guard
/// alone could not show that the renewals of several guards must share the
/// connection set aside for them.)
fn starving_round(
    lock: &dyn Lock,
    readers: Option<&dyn Lock>,
    rec: &Recorder,
    res: &mut Resource,
    hold: Duration,
    pool: &r2d2::Pool<redis::Client>,
) {
    // It waits behind the holds queued before it.
    let wait = Duration::from_secs(10);
    let read = format!("{RW_NAME}{READ_SUFFIX}");
    let mut taken: Vec<Taken> = std::iter::once(SLOW_KEY)
        .chain(FAST_KEYS)
        .filter_map(|key| take(lock, rec, res, key, wait))
        .collect();
    if let Some(readers) = readers {
        // Taken at the same moment by threads of their own, as an
        // application's threads would, so that their renewals fall due
        // together. A writer queued first keeps them out: the round goes
        // on with the holds it has.
        let brief = Duration::from_millis(200);
        let url = res.url.clone();
        let together = std::sync::Barrier::new(STARVING_READS);
        let reads: Vec<Taken> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..STARVING_READS)
                .map(|_| {
                    scope.spawn(|| {
                        let mut own = Resource::open(&url);
                        together.wait();
                        take(readers, rec, &mut own, &read, brief)
                    })
                })
                .collect();
            threads
                .into_iter()
                .filter_map(|t| t.join().ok().flatten())
                .collect()
        });
        taken.extend(reads);
    }
    if taken.is_empty() {
        return;
    }
    for t in &taken {
        rec.put(&line::starving(&t.key, t.token, now_ns()));
    }
    let starver = {
        let pool = pool.clone();
        std::thread::spawn(move || {
            let mut taken = Vec::new();
            let until = Instant::now() + Duration::from_millis(1500);
            while Instant::now() < until {
                if let Ok(c) = pool.get_timeout(Duration::from_millis(20)) {
                    taken.push(c);
                }
            }
            (now_ns(), taken)
        })
    };
    // Every guard at once: each loss recorded within a few milliseconds of
    // its guard telling it.
    let until = Instant::now() + hold;
    let mut told = vec![false; taken.len()];
    while Instant::now() < until && told.iter().any(|t| !t) {
        for (t, told) in taken.iter().zip(told.iter_mut()).filter(|(_, t)| !**t) {
            if t.held.wait_lost(Duration::from_millis(1)) {
                *told = true;
                rec.put(&line::lost(&t.key, t.token, now_ns()));
            }
        }
    }
    let (t, connections) = starver.join().expect("the starving thread");
    for s in &taken {
        rec.put(&line::starved(&s.key, s.token, t, connections.len()));
    }
    drop(connections);
    for t in taken {
        leave(t, rec, res);
    }
}

/// A small deterministic generator (xorshift), enough to vary holds and keys.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}
