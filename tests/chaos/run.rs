//! One scenario's run: its servers, its worker processes and the faults
//! injected (see `inject.rs`); `finish.rs` stops the workers and checks
//! the history.

mod finish;
mod inject;

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{self, Server, TempDir};
use crate::history::{self, now_ns, wall_offset_ns, Event};
use crate::linear::{self, Workloads};
use crate::support::{lock_name, victims_of};
use crate::worker::{self, Rng, Settings, FAST_KEYS, PREFIX, SLOW_KEY};
use crate::{
    Forks, Outcome, Scenario, SlowWaiters, BACKOFF_MAX, GAP, IO, NO_CHANNELS, SLOW_BACKOFF, TTL,
    WORKERS,
};
use redmutex_testkit::proxy::{Mode, Proxy};

struct Worker {
    id: u32,
    child: Child,
    stdin: Option<ChildStdin>,
    /// Its own way to the server (single-server scenarios).
    proxy: Option<Proxy>,
    /// When it was last told to starve its pool.
    starved: Option<Instant>,
}

/// One scenario's servers, workers and record of faults.
struct Run<'a> {
    scenario: &'a Scenario,
    servers: Vec<Server>,
    /// Redlock: one proxy in front of each master.
    master_proxies: Vec<Proxy>,
    /// Sentinel: the sentinels watching `servers` (a master and a replica).
    sentinels: Option<common::Sentinels>,
    resource: Server,
    dir: TempDir,
    workers: Vec<Worker>,
    next_id: u32,
    events: Vec<Event>,
    killed: HashSet<u32>,
    /// The worker that logs in without channel rights.
    acl_worker: Option<u32>,
    /// The wall clock's offset from the monotonic clock, lowest and highest
    /// seen (nanoseconds).
    wall: (i128, i128),
    violations: Vec<history::Violation>,
    rng: Rng,
}

pub(crate) fn run(scenario: &Scenario) -> Outcome {
    let mut servers: Vec<Server> = (0..if scenario.redlock { 3 } else { 1 })
        .map(|_| Server::start())
        .collect();
    let sentinels = scenario.sentinel.map(|_| {
        servers.push(Server::replica_of(&servers[0]));
        common::Sentinels::watch(&servers[0])
    });
    let master_proxies = if scenario.redlock {
        servers.iter().map(|s| Proxy::start(s.port())).collect()
    } else {
        Vec::new()
    };
    let mut r = Run {
        scenario,
        servers,
        master_proxies,
        sentinels,
        resource: Server::start(),
        dir: TempDir::new("chaos"),
        workers: Vec::new(),
        next_id: 0,
        events: Vec::new(),
        killed: HashSet::new(),
        acl_worker: None,
        wall: (wall_offset_ns(), wall_offset_ns()),
        violations: Vec::new(),
        rng: Rng::new(now_ns()),
    };
    r.add_acl_user();
    for _ in 0..WORKERS {
        r.spawn();
    }
    r.await_first_entries();
    match scenario.soak {
        None => {
            for &k in &scenario.faults {
                r.inject(k);
                std::thread::sleep(GAP);
            }
            if scenario.faults.is_empty() {
                std::thread::sleep(GAP * 2);
            }
        }
        Some(d) => {
            let until = Instant::now() + d;
            while Instant::now() < until {
                let k = scenario.faults[r.rng.below(scenario.faults.len() as u64) as usize];
                r.inject(k);
                std::thread::sleep(Duration::from_millis(300 + r.rng.below(1200)));
            }
            std::thread::sleep(GAP);
        }
    }
    r.finish()
}

impl Run<'_> {
    /// The ACL user without channel rights (again after a restart: users are
    /// configuration, not data).
    fn add_acl_user(&self) {
        for s in &self.servers {
            let _: () = redis::cmd("ACL")
                .arg("SETUSER")
                .arg(NO_CHANNELS)
                .arg(&["on", ">secret", "~*", "+@all", "resetchannels"][..])
                .query(&mut s.conn())
                .unwrap();
        }
    }

    fn log_path(&self, id: u32) -> PathBuf {
        self.dir.0.join(format!("worker-{id}.log"))
    }

    fn spawn(&mut self) {
        let id = self.next_id;
        self.next_id += 1;
        let (proxy, lock_urls) = if let Some(sentinels) = &self.sentinels {
            (None, sentinels.urls())
        } else if self.scenario.redlock {
            (None, self.master_proxies.iter().map(Proxy::url).collect())
        } else {
            let proxy = Proxy::start(self.servers[0].port());
            // One real worker at a time logs in as a user without channel
            // rights: no release announcements for it, only its backoff.
            let acl = self.scenario.flaw.is_none()
                && self.acl_worker.is_none_or(|w| self.killed.contains(&w));
            if acl {
                self.acl_worker = Some(id);
            }
            let url = if acl {
                format!("redis://{NO_CHANNELS}:secret@127.0.0.1:{}/", proxy.port())
            } else {
                proxy.url()
            };
            (Some(proxy), vec![url])
        };
        let settings = Settings {
            id,
            lock_urls,
            resource_url: self.resource.url(),
            out: self.log_path(id),
            ttl: TTL,
            io: IO,
            backoff_max: if self.scenario.slow_waiters == SlowWaiters::No {
                BACKOFF_MAX
            } else {
                SLOW_BACKOFF
            },
            flaw: self.scenario.flaw,
            forks: match self.scenario.forked_workers {
                Forks::No => 0,
                Forks::Yes => 1,
                Forks::ChildWithoutWatchdog => 2,
            },
            sentinel: self.scenario.sentinel,
            cluster: false,
            clock_ahead: if self.scenario.fast_clocks && id.is_multiple_of(2) {
                Duration::from_secs(3600)
            } else {
                Duration::ZERO
            },
        };
        let mut child = Command::new(std::env::current_exe().expect("this binary"))
            .env(worker::ENV, settings.encode())
            .env(linear::ENV, Workloads::of(self.scenario).code())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start a worker process");
        let stdin = child.stdin.take();
        self.workers.push(Worker {
            id,
            child,
            stdin,
            proxy,
            starved: None,
        });
    }

    /// Waits until every worker has recorded a critical section.
    fn await_first_entries(&self) {
        common::wait_until(
            "every worker in a critical section",
            Duration::from_secs(30),
            || {
                self.workers.iter().all(|w| {
                    std::fs::read_to_string(self.log_path(w.id)).is_ok_and(|t| t.contains("E "))
                })
            },
        );
    }

    fn conn(&self, i: usize) -> redis::Connection {
        self.servers[i].conn()
    }

    /// The worker holding the slow key, from the metadata in its value.
    fn holder(&mut self) -> usize {
        let give_up = Instant::now() + Duration::from_secs(3);
        while Instant::now() < give_up {
            for i in 0..self.servers.len() {
                if let Some(pos) = self.holding(i, SLOW_KEY) {
                    return pos;
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        0
    }

    /// The worker holding the lock `name` on server `i`, from the metadata
    /// in its value (none when the server cannot be reached: a server
    /// Sentinel is reconfiguring drops its clients).
    fn holding(&self, i: usize, name: &str) -> Option<usize> {
        let mut c = self.servers[i].try_conn().ok()?;
        let v: Option<String> = redis::cmd("GET")
            .arg(format!("{PREFIX}:{name}"))
            .query(&mut c)
            .unwrap_or(None);
        let id = v
            .as_deref()
            .and_then(|v| v.rsplit(':').next())
            .and_then(|m| m.strip_prefix('w'))
            .and_then(|n| n.parse::<u32>().ok())?;
        self.workers.iter().position(|w| w.id == id)
    }

    /// A worker holding the workloads' lock between its read of the control
    /// register and its write (its last `I c` record not completed yet), by
    /// the lock's metadata and the tail of the worker's record file; none
    /// within 5 s: `None`.
    fn linear_holder(&self) -> Option<usize> {
        use std::io::{Read, Seek, SeekFrom};
        let give_up = Instant::now() + Duration::from_secs(5);
        while Instant::now() < give_up {
            if let Some(pos) = self.holding(0, linear::LOCK) {
                let mut tail = String::new();
                let read =
                    std::fs::File::open(self.log_path(self.workers[pos].id)).and_then(|mut f| {
                        let len = f.metadata()?.len();
                        f.seek(SeekFrom::Start(len.saturating_sub(16 * 1024)))?;
                        f.read_to_string(&mut tail)
                    });
                // The writer thread's records.
                let writer = linear::process(self.workers[pos].id, linear::WRITER);
                let last = |what: &str| {
                    let prefix = format!("{what} c {writer} ");
                    tail.lines()
                        .rev()
                        .find(|l| l.starts_with(&prefix))
                        .and_then(|l| l.split(' ').nth(3).map(str::to_owned))
                };
                let invoked = last("I");
                if read.is_ok() && invoked.is_some() && invoked != last("C") {
                    return Some(pos);
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        None
    }

    /// Every lock key on server `i`, as a victim.
    fn locks_on(&self, i: usize) -> Vec<(String, u64, Option<u32>)> {
        victims_of(self.read_locks(i, false).unwrap_or_default())
    }

    /// `FLUSHALL` on server `i`; the lock keys it took, as victims.
    fn flush(&self, i: usize) -> Vec<(String, u64, Option<u32>)> {
        victims_of(self.read_locks(i, true).expect("FLUSHALL"))
    }

    /// The suite's string keys on server `i` with their values, then a
    /// `FLUSHALL` in the same script if `flush`.
    fn read_locks(&self, i: usize, flush: bool) -> redis::RedisResult<Vec<(String, String)>> {
        redis::Script::new(READ_LOCKS)
            .arg(format!("{PREFIX}:*"))
            .arg(if flush { "flush" } else { "" })
            .invoke(&mut self.conn(i))
    }

    /// Puts a dead waiter at the head of every lock's queue, with a place
    /// (and a claim, when handed the lock) that lasts a minute.
    fn queue_ghost(&self) {
        let mut c = self.conn(0);
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut c).expect("TIME");
        let now_ms = secs * 1000 + micros / 1000;
        let stay = SLOW_BACKOFF.as_millis();
        for key in FAST_KEYS.iter().chain([&SLOW_KEY]) {
            let (queue, waiters) = common::queue_keys(Some(PREFIX), key);
            let _: () = redis::pipe()
                .cmd("ZADD")
                .arg(&queue)
                .arg(1)
                .arg("ghost")
                .ignore()
                .cmd("HSET")
                .arg(&waiters)
                .arg("ghost")
                .arg(format!("{now_ms}:{stay}:{stay}:ghost"))
                .ignore()
                .query(&mut c)
                .expect("queue a dead waiter");
        }
    }

    fn kill_worker(&mut self, pos: usize) -> u32 {
        let mut w = self.workers.remove(pos);
        w.child.kill().expect("kill -9 a worker");
        let _ = w.child.wait();
        self.killed.insert(w.id);
        self.spawn();
        w.id
    }

    /// Memory pressure on server 0: `maxmemory` just above what it uses,
    /// `volatile-ttl`, and filler keys without a TTL until a write fails
    /// with OOM (every key with a TTL has been evicted by then); the
    /// pressure stays a second, then goes. When it began, and the locks
    /// evicted (as keyspace notifications name them, with the values read
    /// just before).
    fn evict(&self) -> (u64, Vec<(String, u64)>) {
        let server = &self.servers[0];
        let mut c = server.conn();
        server.config_set("notify-keyspace-events", "Ee");
        // Every eviction, heard as it happens.
        let mut sub = self.conn(0);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (listening, heard) = std::sync::mpsc::channel();
        let listener = {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut evicted = sub.as_pubsub();
                evicted
                    .subscribe("__keyevent@0__:evicted")
                    .expect("subscribe to evictions");
                evicted
                    .set_read_timeout(Some(Duration::from_millis(50)))
                    .expect("timeout");
                let _ = listening.send(());
                let mut out = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    if let Ok(msg) = evicted.get_message() {
                        let key: String = msg.get_payload().unwrap_or_default();
                        if let Some(name) = lock_name(&key) {
                            out.push((name, now_ns()));
                        }
                    }
                }
                out
            })
        };
        heard.recv().expect("the eviction listener");
        let info: String = redis::cmd("INFO").arg("memory").query(&mut c).unwrap();
        let used: u64 = common::info_field(&info, "used_memory")
            .and_then(|v| v.parse().ok())
            .expect("used_memory");
        server.config_set("maxmemory-policy", "volatile-ttl");
        let start = now_ns();
        server.config_set("maxmemory", &(used + 256 * 1024).to_string());
        let filler = "x".repeat(16 * 1024);
        let mut n = 0;
        while n < 1000 {
            let r: redis::RedisResult<()> = redis::cmd("SET")
                .arg(format!("filler:{n}"))
                .arg(&filler)
                .query(&mut c);
            n += 1;
            if r.is_err() {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(1000));
        server.config_set("maxmemory", "0");
        for i in 0..n {
            let _: redis::RedisResult<()> =
                redis::cmd("DEL").arg(format!("filler:{i}")).query(&mut c);
        }
        server.config_set("maxmemory-policy", "noeviction");
        // Evictions still on their way.
        std::thread::sleep(Duration::from_millis(100));
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let evicted = listener.join().expect("the eviction listener");
        server.config_set("notify-keyspace-events", "");
        (start, evicted)
    }

    /// Sentinel: a forced failover (`SENTINEL FAILOVER`), until the old
    /// master has become a replica of the new one with its link up; the
    /// old master's position in `servers`.
    fn failover(&self) -> usize {
        let sentinels = self.sentinels.as_ref().expect("sentinels");
        let mut c = redis::Client::open(sentinels.urls()[0].as_str())
            .and_then(|c| c.get_connection())
            .expect("a sentinel");
        let master_port = |c: &mut redis::Connection| -> Option<u16> {
            let addr: Vec<String> = redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(worker::SENTINEL_MASTER)
                .query(c)
                .ok()?;
            addr.get(1)?.parse().ok()
        };
        let demoted = |i: usize| {
            // Sentinel drops the server's clients as it demotes it: a
            // connection refused or reset here means not yet.
            let Ok(mut c) = self.servers[i].try_conn() else {
                return false;
            };
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut c)
                .unwrap_or_default();
            common::info_field(&info, "role").as_deref() == Some("slave")
                && common::info_field(&info, "master_link_status").as_deref() == Some("up")
        };
        // A failover can be refused while the last one settles, or be
        // aborted by Sentinel; then it is asked for again.
        for _ in 0..5 {
            let Some(old) =
                master_port(&mut c).and_then(|p| self.servers.iter().position(|s| s.port() == p))
            else {
                std::thread::sleep(Duration::from_millis(200));
                continue;
            };
            let asked = redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg(worker::SENTINEL_MASTER)
                .query::<()>(&mut c);
            if asked.is_err() {
                std::thread::sleep(Duration::from_millis(500));
                continue;
            }
            // Sentinel turns the old master into a replica when it next
            // looks at it (about every 10 s).
            let give_up = Instant::now() + Duration::from_secs(60);
            while Instant::now() < give_up {
                if demoted(old) {
                    return old;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("Sentinel did not fail over in five tries");
    }

    /// Tells a worker that has not starved for a while to run a starving
    /// round (one at a time per worker: each can wait seconds for the slow
    /// key); its position.
    fn starve(&mut self) -> Option<usize> {
        let now = Instant::now();
        let pos = self.workers.iter().position(|w| {
            w.starved
                .is_none_or(|t| now.duration_since(t) > Duration::from_secs(20))
        })?;
        let w = &mut self.workers[pos];
        w.starved = Some(now);
        let stdin = w.stdin.as_mut().expect("a worker's stdin");
        stdin
            .write_all(b"starve\n")
            .expect("tell a worker to starve");
        stdin.flush().expect("flush");
        Some(pos)
    }

    /// Sets the proxy of the worker at `pos` to `mode` for `hold`.
    fn cut(&mut self, pos: usize, mode: Mode, hold: Duration) -> u32 {
        let w = &self.workers[pos];
        let proxy = w.proxy.as_ref().expect("a proxy per worker");
        proxy.set(mode);
        std::thread::sleep(hold);
        proxy.set(Mode::Pass);
        w.id
    }
}

/// Reads every string key matching ARGV[1] with its value; then FLUSHALL
/// when ARGV[2] is "flush", so the victims are read atomically with it.
const READ_LOCKS: &str = r"
local out = {}
for _, k in ipairs(redis.call('KEYS', ARGV[1])) do
  local ok, v = pcall(redis.call, 'GET', k)
  if ok and v then table.insert(out, {k, v}) end
end
if ARGV[2] == 'flush' then redis.call('FLUSHALL') end
return out
";
