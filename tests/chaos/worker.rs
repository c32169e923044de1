//! A worker process: this test binary, re-executed by the coordinator, with
//! its own pool, watchdog threads and listener, so that `kill -9` and
//! `SIGSTOP` hit a real process.
//!
//! Each thread loops: lock → record entry → critical section (a fenced read
//! of a counter in the resource Redis, a hold, a fenced write of the counter
//! plus one) → record exit → unlock → record the unlock. Several "fast"
//! threads take short holds on a few keys; one "slow" thread takes holds of
//! about a TTL on the key `slow`, so that watchdogs renew and the faults aimed
//! at a holder find one; where the scenario asks, two more threads run the
//! linearizability workloads (see `worker/linear.rs`). Standard input
//! carries commands (`starve`); its end means stop.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::sentinel::{LockedSentinelClient, SentinelClient, SentinelServerType};
use redis::Script;
use redmutex::{Backoff, Error, Guard, Locker, RwLock, Semaphore};

mod linear;
mod rounds;

use crate::broken::{BrokenLocker, Flaw};
use crate::history::{Op, Unlock, READ_SUFFIX};
use rounds::work;
pub use rounds::Rng;

/// The environment variable that makes this binary a worker; its value is
/// the worker's settings.
pub const ENV: &str = "REDMUTEX_CHAOS_WORKER";

/// The keys the fast threads lock; `slow` is the slow thread's.
pub const FAST_KEYS: [&str; 3] = ["k0", "k1", "k2"];
pub const SLOW_KEY: &str = "slow";
/// The semaphore the permit thread takes permits of (not on Redlock, nor
/// with a broken locker), and its count: sections are recorded under
/// `sem#0` and `sem#1`.
pub const SEM_NAME: &str = "sem";
pub const SEM_PERMITS: u32 = 2;
/// The read-write lock the read-write thread takes (where the semaphore
/// is): write holds are recorded under `rw`, read holds under `rw.r`.
pub const RW_NAME: &str = "rw";
pub const PREFIX: &str = "chaos";
/// The name the sentinels know the master by.
pub const SENTINEL_MASTER: &str = "mymaster";
const FAST_THREADS: usize = 3;
const POOL_SIZE: u32 = 8;

#[derive(Debug, Clone)]
pub struct Settings {
    pub id: u32,
    /// One URL per lock server (several: Redlock).
    pub lock_urls: Vec<String>,
    pub resource_url: String,
    pub out: PathBuf,
    pub ttl: Duration,
    pub io: Duration,
    pub backoff_max: Duration,
    /// The negative controls: a locker broken in this one way.
    pub flaw: Option<Flaw>,
    /// Sentinel: `lock_urls` are the sentinels', and the locker asks this
    /// many replicas to acknowledge each grant.
    pub sentinel: Option<u64>,
    /// Redlock: how far this worker's clock runs fast for its proposals.
    pub clock_ahead: Duration,
    /// 1: the worker uses a watchdog, then works in a child it forks
    /// (which dies with it); 2: so, and the child's lockers run without a
    /// watchdog (a negative control); 0: neither.
    pub forks: u8,
    /// A Redis Cluster: `lock_urls` are its nodes', and the locker's
    /// backoff is `backoff_max` every time (see `cluster.rs`).
    pub cluster: bool,
}

impl Settings {
    pub fn encode(&self) -> String {
        format!(
            "{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}",
            self.id,
            self.lock_urls.join(","),
            self.resource_url,
            self.out.display(),
            self.ttl.as_millis(),
            self.io.as_millis(),
            self.backoff_max.as_millis(),
            self.flaw.map_or("-", Flaw::code),
            self.sentinel.map_or("-".to_owned(), |n| n.to_string()),
            self.clock_ahead.as_millis(),
            self.forks,
            u8::from(self.cluster)
        )
    }

    fn decode(s: &str) -> Settings {
        let f: Vec<&str> = s.split('|').collect();
        let get = |i: usize| f.get(i).copied().unwrap_or_default();
        let ms = |i: usize| Duration::from_millis(get(i).parse().expect("a number of ms"));
        Settings {
            id: get(0).parse().expect("worker id"),
            lock_urls: get(1).split(',').map(str::to_owned).collect(),
            resource_url: get(2).to_owned(),
            out: PathBuf::from(get(3)),
            ttl: ms(4),
            io: ms(5),
            backoff_max: ms(6),
            flaw: Flaw::parse(get(7)),
            sentinel: get(8).parse().ok(),
            clock_ahead: ms(9),
            forks: get(10).parse().unwrap_or(0),
            cluster: get(11) == "1",
        }
    }
}

/// A held lock, whichever locker gave it.
pub trait Held: Send {
    /// The key its section is recorded under, for a lock asked for as
    /// `asked`: the key itself, or `<name>#<i>` for permit `i` of a
    /// semaphore (each permit excludes like a lock).
    fn key(&self, asked: &str) -> String {
        asked.to_owned()
    }
    fn token(&self) -> u64;
    /// The real guard, for `run_if_held` (none for a broken locker's hold).
    fn guard(&self) -> Option<&Guard> {
        None
    }
    fn wait_lost(&self, d: Duration) -> bool;
    fn is_lost(&self) -> bool;
    fn unlock(self: Box<Self>) -> Unlock;
}

/// A locker, real or broken.
pub trait Lock: Send + Sync {
    fn lock(&self, key: &str, wait: Duration) -> Result<Box<dyn Held>, String>;
}

struct Real {
    locker: Locker,
}

impl Held for Guard {
    fn key(&self, asked: &str) -> String {
        match self.permit() {
            Some(i) => format!("{asked}#{i}"),
            None => asked.to_owned(),
        }
    }
    fn token(&self) -> u64 {
        self.fencing_token()
    }
    fn guard(&self) -> Option<&Guard> {
        Some(self)
    }
    fn wait_lost(&self, d: Duration) -> bool {
        Guard::wait_lost(self, d)
    }
    fn is_lost(&self) -> bool {
        Guard::is_lost(self)
    }
    fn unlock(self: Box<Self>) -> Unlock {
        match Guard::unlock(*self) {
            Ok(()) => Unlock::Ok,
            Err(Error::Lost { .. }) => Unlock::Lost,
            Err(e) => {
                // Why, for whoever reads a failed run (errors never carry
                // the owner token).
                eprintln!(
                    "chaos worker: an unlock failed: {e}: {:?}",
                    std::error::Error::source(&e)
                );
                Unlock::Err
            }
        }
    }
}

/// The permits of one semaphore, taken as locks.
struct Permits {
    semaphore: Semaphore,
}

impl Lock for Permits {
    fn lock(&self, _name: &str, wait: Duration) -> Result<Box<dyn Held>, String> {
        match self.semaphore.acquire_timeout(wait) {
            Ok(g) => Ok(Box::new(g)),
            Err(e) => Err(error_kind(&e).to_owned()),
        }
    }
}

/// A read-write lock: a read hold when asked for `<name>.r`, else the
/// write hold.
struct ReadWrite {
    lock: RwLock,
}

impl Lock for ReadWrite {
    fn lock(&self, key: &str, wait: Duration) -> Result<Box<dyn Held>, String> {
        let got = if key.ends_with(READ_SUFFIX) {
            self.lock.read_timeout(wait)
        } else {
            self.lock.write_timeout(wait)
        };
        match got {
            Ok(g) => Ok(Box::new(g)),
            Err(e) => Err(error_kind(&e).to_owned()),
        }
    }
}

impl Lock for Real {
    fn lock(&self, key: &str, wait: Duration) -> Result<Box<dyn Held>, String> {
        match self.locker.lock_timeout(key, wait) {
            Ok(g) => Ok(Box::new(g)),
            Err(e) => Err(error_kind(&e).to_owned()),
        }
    }
}

fn error_kind(e: &Error) -> &'static str {
    match e {
        Error::Timeout { .. } => "timeout",
        Error::Redis(_) => "redis",
        Error::Pool(_) => "pool",
        Error::NoQuorum { .. } => "no-quorum",
        Error::NotReplicated { .. } => "not-replicated",
        _ => "other",
    }
}

/// The fenced resource: a counter per key that accepts a read or a write
/// only with a fencing token at least as large as any it has seen.
static FENCED: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(
        r"
local t = tonumber(ARGV[1])
local max = tonumber(redis.call('GET', KEYS[1]) or '0')
if t < max then
  redis.call('HINCRBY', KEYS[3], 'rejected', 1)
  return false
end
if t > max then redis.call('SET', KEYS[1], ARGV[1]) end
if ARGV[2] == 'get' then return tonumber(redis.call('GET', KEYS[2]) or '0') end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('HINCRBY', KEYS[3], 'accepted', 1)
return 1
",
    )
});

pub fn resource_keys(key: &str) -> [String; 3] {
    [
        format!("max:{key}"),
        format!("count:{key}"),
        format!("stats:{key}"),
    ]
}

struct Resource {
    url: String,
    conn: redis::Connection,
}

impl Resource {
    fn open(url: &str) -> Resource {
        let conn = redis::Client::open(url)
            .expect("resource url")
            .get_connection_with_timeout(Duration::from_secs(5))
            .expect("connect to the resource");
        conn.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        Resource {
            url: url.to_owned(),
            conn,
        }
    }

    fn call(&mut self, key: &str, token: u64, what: &str) -> (Op, i64) {
        let k = resource_keys(key);
        let r: redis::RedisResult<Option<i64>> = FENCED
            .key(&k[0])
            .key(&k[1])
            .key(&k[2])
            .arg(token.to_string())
            .arg(what)
            .invoke(&mut self.conn);
        match r {
            Ok(Some(v)) => (Op::Ok, v),
            Ok(None) => (Op::Rejected, 0),
            Err(_) => {
                // Start over on a fresh connection.
                *self = Resource::open(&self.url);
                (Op::Err, 0)
            }
        }
    }
}

struct Recorder {
    file: File,
}

impl Recorder {
    /// One `write` per record: what is written survives a `kill -9`.
    fn put(&self, record: &str) {
        let _ = (&self.file).write_all(record.as_bytes());
    }
}

pub fn main(spec: &str) {
    let settings = Settings::decode(spec);
    if settings.forks > 0 {
        forked(settings);
    } else {
        serve(settings);
    }
}

/// Uses a watchdog (so that its starter and a parked worker exist here),
/// closes its pool as the crate docs ask before a fork, then serves in a
/// forked child that dies with this process (the harness kills this one).
fn forked(settings: Settings) {
    let pool = r2d2::Pool::builder()
        .max_size(2)
        .test_on_check_out(false)
        .idle_timeout(None)
        .max_lifetime(None)
        .build_unchecked(redis::Client::open(settings.lock_urls[0].as_str()).expect("url"));
    let locker = builder(Locker::builder(pool), &settings)
        .watchdog(true)
        .build()
        .expect("a valid locker");
    let guard = locker
        .lock(format!("warm-up-w{}", settings.id))
        .expect("the warm-up lock");
    let until = |what: &str, ok: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ok() {
            assert!(Instant::now() < deadline, "worker: {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    until("the watchdog ran", &|| {
        redmutex::watchdog_threads().running > 0
    });
    guard.unlock().expect("the warm-up unlock");
    until("its worker parked", &|| {
        redmutex::watchdog_threads().parked > 0
    });
    drop(locker);
    until("the pool's threads ended", &|| threads_named("r2d2") == 0);
    let parent = nix::unistd::getpid();
    let code = redmutex_testkit::fork::in_child(move || {
        let dies_with_parent =
            nix::sys::prctl::set_pdeathsig(Some(nix::sys::signal::Signal::SIGKILL)).is_ok();
        if !dies_with_parent || nix::unistd::getppid() != parent {
            return 1;
        }
        serve(settings);
        0
    });
    std::process::exit(code.unwrap_or(1));
}

/// How many threads of this process have a name starting with `prefix`.
fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(Result::ok)
                .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
                .filter(|name| name.starts_with(prefix))
                .count()
        })
        .unwrap_or(0)
}

/// One worker's work, in this process.
fn serve(settings: Settings) {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&settings.out)
        .expect("open the record file");
    let rec = Arc::new(Recorder { file });
    if let Some(replicas) = settings.sentinel {
        // A `String`: redis-rs takes one without its TLS feature, and any
        // `AsRef<str>` with it.
        let service = String::from(SENTINEL_MASTER);
        let client = SentinelClient::build(
            settings.lock_urls.clone(),
            service,
            None,
            SentinelServerType::Master,
        )
        .expect("sentinel urls");
        let pool = r2d2::Pool::builder()
            .max_size(POOL_SIZE)
            .min_idle(Some(0))
            .test_on_check_out(false)
            .connection_timeout(Duration::from_secs(1))
            .build_unchecked(LockedSentinelClient::new(client));
        let locker = builder(Locker::builder(pool), &settings)
            .min_replicas(replicas)
            .replica_timeout(settings.io / 2)
            .build()
            .expect("a valid locker");
        let extras = extras_of(&locker);
        return work(&settings, rec, Arc::new(Real { locker }), extras, &[]);
    }
    if settings.cluster {
        let client = redis::cluster::ClusterClient::builder(settings.lock_urls.clone())
            .connection_timeout(settings.io)
            .response_timeout(settings.io)
            .build()
            .expect("cluster urls");
        let pool = r2d2::Pool::builder()
            .max_size(POOL_SIZE)
            .min_idle(Some(0))
            .test_on_check_out(false)
            .connection_timeout(Duration::from_secs(1))
            .build_unchecked(client);
        // A waiter has nothing but a wake-up to take a hand-over up
        // promptly: its backoff is long every time (a queued waiter still
        // calls once a second, whatever its backoff).
        let locker = builder(Locker::builder(pool), &settings)
            .backoff(Backoff::fixed(settings.backoff_max))
            .build()
            .expect("a valid locker");
        return work(&settings, rec, Arc::new(Real { locker }), None, &[]);
    }
    let pools: Vec<r2d2::Pool<redis::Client>> = settings
        .lock_urls
        .iter()
        .map(|u| {
            r2d2::Pool::builder()
                .max_size(POOL_SIZE)
                .min_idle(Some(0))
                .test_on_check_out(false)
                .connection_timeout(Duration::from_secs(1))
                .build_unchecked(redis::Client::open(u.as_str()).expect("lock server url"))
        })
        .collect();
    let (lock, extras): (Arc<dyn Lock>, _) = if let Some(flaw) = settings.flaw {
        let broken = BrokenLocker::new(
            pools.first().expect("a pool").clone(),
            settings.ttl,
            settings.id,
            flaw,
        );
        (Arc::new(broken), None)
    } else {
        let first = pools.first().expect("a pool").clone();
        let mut b = builder(Locker::builder(first), &settings);
        for p in pools.iter().skip(1) {
            b = b.instance(p.clone());
        }
        let locker = b.build().expect("a valid locker");
        let extras = (pools.len() == 1).then(|| extras_of(&locker)).flatten();
        (Arc::new(Real { locker }), extras)
    };

    work(&settings, rec, lock, extras, &pools);
}

/// The other primitives on `locker`: the permits of the suite's semaphore,
/// and its read-write lock.
fn extras_of(locker: &Locker) -> Option<Extras> {
    let semaphore = locker
        .semaphore(SEM_NAME, SEM_PERMITS)
        .expect("a valid semaphore");
    let lock = locker.rwlock(RW_NAME).expect("a valid read-write lock");
    Some(Extras {
        permits: Arc::new(Permits { semaphore }),
        rw: Arc::new(ReadWrite { lock }),
    })
}

/// The threads a worker runs beside its lock threads, where it can.
struct Extras {
    permits: Arc<dyn Lock>,
    rw: Arc<dyn Lock>,
}

/// The settings every real locker of a worker shares.
fn builder(b: redmutex::Builder, settings: &Settings) -> redmutex::Builder {
    b.prefix(PREFIX)
        .ttl(settings.ttl)
        .io_timeout(settings.io)
        .checkout_timeout(settings.io)
        .metadata(format!("w{}", settings.id))
        .backoff(Backoff::exponential(
            Duration::from_millis(5),
            settings.backoff_max,
        ))
        .test_clock_ahead(settings.clock_ahead)
        .watchdog(settings.forks != 2)
}
