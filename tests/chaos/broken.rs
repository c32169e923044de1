//! The negative controls: a locker built here that is right in every way
//! but one, so that each of the checker's rules can be shown to catch the
//! mistake it is there for. Without a flaw it takes a key with `SET NX PX`
//! and a token from `INCR`, renews and releases with owner-checked scripts,
//! and reports a loss when a renewal finds the key gone or its lease runs
//! out; each [`Flaw`] breaks one of those.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::Script;

use crate::history::Unlock;
use crate::worker::{Held, Lock, PREFIX};

/// The one mistake a broken locker makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flaw {
    /// Every fourth grant reuses the previous fencing token.
    ReusesToken,
    /// Every tenth grant first resets the fencing counter.
    ResetsCounter,
    /// Releases with a plain `DEL`, whoever holds the key.
    ReleasesWithoutOwnerCheck,
    /// Takes a renewal's "not ours" for a confirmation.
    IgnoresNotOurs,
    /// `unlock` does nothing: the key stays until its TTL.
    NeverReleases,
    /// Never tells the holder its lease is lost.
    NeverReportsLoss,
    /// Renews through the pool like any other call, with no connection set
    /// aside: an application that holds every pooled connection starves its
    /// leases. (Every broken locker renews so; only this control's faults
    /// bring it out.)
    RenewsThroughThePool,
}

impl Flaw {
    pub const ALL: [Flaw; 7] = [
        Flaw::ReusesToken,
        Flaw::ResetsCounter,
        Flaw::ReleasesWithoutOwnerCheck,
        Flaw::IgnoresNotOurs,
        Flaw::NeverReleases,
        Flaw::NeverReportsLoss,
        Flaw::RenewsThroughThePool,
    ];

    pub fn code(self) -> &'static str {
        match self {
            Flaw::ReusesToken => "reuses-token",
            Flaw::ResetsCounter => "resets-counter",
            Flaw::ReleasesWithoutOwnerCheck => "release-without-owner-check",
            Flaw::IgnoresNotOurs => "ignores-not-ours",
            Flaw::NeverReleases => "never-releases",
            Flaw::NeverReportsLoss => "never-reports-loss",
            Flaw::RenewsThroughThePool => "renews-through-the-pool",
        }
    }

    pub fn parse(s: &str) -> Option<Flaw> {
        Flaw::ALL.into_iter().find(|f| f.code() == s)
    }
}

/// The prefix's own fencing counter, as redmutex names it: an operator's
/// break (`Locker::break_lock`) takes a hold for its prefix's only once
/// that prefix's counter has reached the hold's token, and refuses the
/// key of a hold no prefix could have written (a counter of its own made
/// every break of a broken locker's hold a refusal: its control never
/// tripped).
const COUNTER: &str = "__redmutex__:fence";

/// 1 when KEYS[1] holds ARGV[1] (and gets ARGV[2] ms), else 0.
const RENEW: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// Deletes KEYS[1] if it holds ARGV[1]; 1 when it did.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

pub struct BrokenLocker {
    pool: r2d2::Pool<redis::Client>,
    ttl: Duration,
    id: u32,
    flaw: Flaw,
    grants: AtomicU64,
    /// The last token of each lock name.
    last_token: Mutex<std::collections::HashMap<String, u64>>,
}

impl BrokenLocker {
    pub fn new(
        pool: r2d2::Pool<redis::Client>,
        ttl: Duration,
        id: u32,
        flaw: Flaw,
    ) -> BrokenLocker {
        BrokenLocker {
            pool,
            ttl,
            id,
            flaw,
            grants: AtomicU64::new(0),
            last_token: Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// The token for a grant of `lock`.
    fn token(&self, c: &mut redis::Connection, lock: &str) -> Option<u64> {
        let n = self.grants.fetch_add(1, Ordering::SeqCst);
        let key = format!("{PREFIX}:{COUNTER}");
        if self.flaw == Flaw::ResetsCounter && n % 10 == 9 {
            let _: redis::RedisResult<()> = redis::cmd("SET").arg(&key).arg(0).query(c);
        }
        let mut last = self.last_token.lock().unwrap();
        if self.flaw == Flaw::ReusesToken && n % 4 == 3 {
            if let Some(t) = last.get(lock) {
                return Some(*t);
            }
        }
        let t: u64 = redis::cmd("INCR").arg(&key).query(c).ok()?;
        last.insert(lock.to_owned(), t);
        Some(t)
    }
}

/// What a broken guard and its watchdog share.
struct Lease {
    lost: AtomicBool,
    /// The lease's local end: the last confirmed renewal's send time + TTL.
    until: Mutex<Instant>,
    stop: AtomicBool,
}

struct BrokenGuard {
    pool: r2d2::Pool<redis::Client>,
    key: String,
    value: String,
    token: u64,
    flaw: Flaw,
    lease: Arc<Lease>,
}

fn conn(pool: &r2d2::Pool<redis::Client>) -> Option<r2d2::PooledConnection<redis::Client>> {
    let c = pool.get_timeout(Duration::from_millis(500)).ok()?;
    c.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    Some(c)
}

impl Lock for BrokenLocker {
    fn lock(&self, key: &str, wait: Duration) -> Result<Box<dyn Held>, String> {
        let redis_key = format!("{PREFIX}:{key}");
        let ttl_ms = self.ttl.as_millis() as u64;
        let give_up = Instant::now() + wait;
        while Instant::now() < give_up {
            let Some(mut c) = conn(&self.pool) else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            let Some(token) = self.token(&mut c, key) else {
                continue;
            };
            let value = format!("{token:032x}:{token}:w{}", self.id);
            let sent = Instant::now();
            let set: redis::RedisResult<Option<String>> = redis::cmd("SET")
                .arg(&redis_key)
                .arg(&value)
                .arg("NX")
                .arg("PX")
                .arg(ttl_ms)
                .query(&mut *c);
            if let Ok(Some(_)) = set {
                let lease = Arc::new(Lease {
                    lost: AtomicBool::new(false),
                    until: Mutex::new(sent + self.ttl),
                    stop: AtomicBool::new(false),
                });
                let (pool, k, v, l, flaw) = (
                    self.pool.clone(),
                    redis_key.clone(),
                    value.clone(),
                    Arc::clone(&lease),
                    self.flaw,
                );
                std::thread::spawn(move || watchdog(&pool, &k, &v, ttl_ms, &l, flaw));
                return Ok(Box::new(BrokenGuard {
                    pool: self.pool.clone(),
                    key: redis_key,
                    value,
                    token,
                    flaw: self.flaw,
                    lease,
                }));
            }
            drop(c);
            std::thread::sleep(Duration::from_millis(2));
        }
        Err("timeout".to_owned())
    }
}

/// Renews every third of the TTL, owner-checked; a "not ours" is a loss
/// (unless the flaw says otherwise), and so is a lease that runs out.
fn watchdog(
    pool: &r2d2::Pool<redis::Client>,
    key: &str,
    value: &str,
    ttl_ms: u64,
    lease: &Lease,
    flaw: Flaw,
) {
    let renew = Script::new(RENEW);
    while !lease.stop.load(Ordering::SeqCst) && !lease.lost.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(ttl_ms / 3));
        if lease.stop.load(Ordering::SeqCst) {
            return;
        }
        let sent = Instant::now();
        let answer: Option<i64> =
            conn(pool).and_then(|mut c| renew.key(key).arg(value).arg(ttl_ms).invoke(&mut *c).ok());
        match answer {
            Some(1) => *lease.until.lock().unwrap() = sent + Duration::from_millis(ttl_ms),
            Some(_) if flaw == Flaw::IgnoresNotOurs => {
                *lease.until.lock().unwrap() = sent + Duration::from_millis(ttl_ms);
            }
            Some(_) => lease.lost.store(true, Ordering::SeqCst),
            None => {}
        }
    }
}

impl BrokenGuard {
    fn lost(&self) -> bool {
        if self.flaw == Flaw::NeverReportsLoss {
            return false;
        }
        if Instant::now() >= *self.lease.until.lock().unwrap() {
            self.lease.lost.store(true, Ordering::SeqCst);
        }
        self.lease.lost.load(Ordering::SeqCst)
    }
}

impl Held for BrokenGuard {
    fn token(&self) -> u64 {
        self.token
    }
    fn wait_lost(&self, d: Duration) -> bool {
        let end = Instant::now() + d;
        while Instant::now() < end {
            if self.lost() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        self.lost()
    }
    fn is_lost(&self) -> bool {
        self.lost()
    }
    fn unlock(self: Box<Self>) -> Unlock {
        self.lease.stop.store(true, Ordering::SeqCst);
        let lost = self.lost();
        if self.flaw == Flaw::NeverReleases {
            return if lost { Unlock::Lost } else { Unlock::Ok };
        }
        let Some(mut c) = conn(&self.pool) else {
            return Unlock::Err;
        };
        let deleted: redis::RedisResult<i64> = if self.flaw == Flaw::ReleasesWithoutOwnerCheck {
            redis::cmd("DEL").arg(&self.key).query(&mut *c)
        } else {
            Script::new(RELEASE)
                .key(&self.key)
                .arg(&self.value)
                .invoke(&mut *c)
        };
        match deleted {
            Ok(1) if !lost => Unlock::Ok,
            Ok(_) => Unlock::Lost,
            Err(_) => Unlock::Err,
        }
    }
}
