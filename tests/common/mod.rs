//! Test support: private `redis-server` processes on free loopback ports,
//! started per test and killed when dropped.
//!
//! Set `REDIS_SERVER` to use another binary. If none is found the test fails
//! with install instructions; it never skips. The server is killed when the
//! `Server` drops (the examples' `ThrowAwayServer` does it).

// Each test binary uses its own part of this module, and test support fails
// loudly: a panic here is a failed test, which is the point.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::disallowed_methods
)]

use std::net::TcpListener;
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use redmutex::{Backoff, Builder, Locker};

// The throw-away server the examples use too, so the start-up logic exists
// once.
use redmutex_testkit as support;

/// How long a server may take to say it is ready.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A running `redis-server`, killed on drop.
pub struct Server {
    inner: support::ThrowAwayServer,
}

impl Server {
    /// Starts a server with persistence off and `DEBUG` enabled.
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// Starts a server with extra command-line arguments.
    pub fn start_with(extra: &[&str]) -> Server {
        let mut args = support::debug_args().to_vec();
        args.extend_from_slice(extra);
        let mut last = String::new();
        // A port found free can be taken by another test before the server
        // binds it: try a few ports.
        for _ in 0..5 {
            match support::ThrowAwayServer::start(&args, START_TIMEOUT) {
                Ok(inner) => return Server { inner },
                Err(e) if e.to_string().starts_with("cannot run") => {
                    panic!("the tests need a real Redis server: {e}")
                }
                Err(e) => last = e.to_string(),
            }
        }
        panic!("could not start redis-server: {last}");
    }

    pub fn port(&self) -> u16 {
        self.inner.port()
    }

    pub fn url(&self) -> String {
        self.inner.url()
    }

    /// A plain connection for the test's own inspection and tampering.
    pub fn conn(&self) -> redis::Connection {
        self.try_conn().unwrap()
    }

    /// As [`Server::conn`], or why not: for polling a server that may be
    /// dropping its clients (Sentinel disconnects every client of a server
    /// it reconfigures, new ones too).
    pub fn try_conn(&self) -> redis::RedisResult<redis::Connection> {
        let c =
            redis::Client::open(self.url())?.get_connection_with_timeout(Duration::from_secs(5))?;
        c.set_read_timeout(Some(Duration::from_secs(10)))?;
        Ok(c)
    }

    /// `CONFIG SET name value`.
    pub fn config_set(&self, name: &str, value: &str) {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .exec(&mut self.conn())
            .unwrap();
    }

    /// A locker over its own pool (as a separate process would have).
    pub fn locker(&self) -> Locker {
        Locker::open(&self.url()).unwrap()
    }

    /// A builder over its own pool.
    pub fn builder(&self) -> Builder {
        Locker::builder(redmutex::pool(&self.url()).unwrap())
    }

    /// A locker over its own pool with lease `ttl` and default settings
    /// otherwise.
    pub fn locker_with_ttl(&self, ttl: Duration) -> Locker {
        self.builder().ttl(ttl).build().unwrap()
    }

    /// A locker over its own pool whose checkouts and calls are each
    /// bounded by `io`, and default settings otherwise.
    pub fn locker_with_io(&self, io: Duration) -> Locker {
        self.builder()
            .io_timeout(io)
            .checkout_timeout(io)
            .build()
            .unwrap()
    }

    /// A locker with a minute of TTL and of backoff: only a release can get
    /// its waiters the lock quickly.
    pub fn slow_locker(&self) -> Locker {
        self.builder()
            .ttl(Duration::from_secs(60))
            .backoff(Backoff::fixed(Duration::from_secs(60)))
            .build()
            .unwrap()
    }

    /// An r2d2 pool of `size` connections with no socket timeouts (as r2d2
    /// makes them) and no checkout ping, so the locker's own bounds are what
    /// a test sees.
    pub fn bare_pool(&self, size: u32) -> r2d2::Pool<redis::Client> {
        r2d2::Pool::builder()
            .max_size(size)
            .test_on_check_out(false)
            .build(redis::Client::open(self.url()).unwrap())
            .unwrap()
    }

    /// Calls of EVALSHA the server has run so far (failed attempts included).
    pub fn evalsha_calls(&self) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.conn())
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse().unwrap())
    }

    /// Puts a waiter that died in the queue of `key` (a locker without a
    /// prefix), at its head: arrival score 1, with `entry` as its record in
    /// the waiters hash.
    pub fn queue_dead_waiter(&self, key: &str, entry: &str) {
        let (q, waiters) = queue_keys(None, key);
        let mut c = self.conn();
        let _: () = redis::cmd("ZADD")
            .arg(&q)
            .arg(1)
            .arg("dead")
            .query(&mut c)
            .unwrap();
        let _: () = redis::cmd("HSET")
            .arg(waiters)
            .arg("dead")
            .arg(entry)
            .query(&mut c)
            .unwrap();
    }

    /// Subscribers of the release channel of lockers without a prefix.
    pub fn release_subscribers(&self) -> i64 {
        let reply: (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(release_channel(None))
            .query(&mut self.conn())
            .unwrap();
        reply.1
    }

    /// Freezes the server process (`SIGSTOP`): connections stay open, nothing answers.
    pub fn pause(&self) {
        signal(self.inner.pid(), "-STOP");
    }

    /// Resumes a paused server (`SIGCONT`).
    pub fn resume(&self) {
        signal(self.inner.pid(), "-CONT");
    }

    /// Kills the server (`SIGKILL`) and waits for it to be gone.
    pub fn kill(&mut self) {
        self.inner.kill();
    }

    /// `kill -9`, then starts it again on the same port and data directory:
    /// it comes back with what its persistence files hold.
    pub fn restart(&mut self) {
        self.inner.restart(START_TIMEOUT).unwrap();
    }

    /// As [`restart`](Self::restart), with `extra` arguments for this start.
    pub fn restart_with(&mut self, extra: &[&str]) {
        self.inner.restart_with(extra, START_TIMEOUT).unwrap();
    }

    /// Its data directory.
    pub fn dir(&self) -> std::path::PathBuf {
        self.inner
            .dir()
            .expect("a server with its own directory")
            .to_owned()
    }

    /// `SAVE`: an RDB snapshot of this moment in its data directory.
    pub fn save(&self) {
        let _: () = redis::cmd("SAVE").query(&mut self.conn()).unwrap();
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "kill {sig} {pid} failed");
}

/// The start of every name the library keeps for itself under `prefix`:
/// the key layout, in one place for the tests (the library's is
/// `protocol/keys.rs`).
pub fn reserved(prefix: Option<&str>) -> String {
    prefix.map_or_else(
        || "__redmutex__:".to_owned(),
        |p| format!("{p}:__redmutex__:"),
    )
}

/// The waiters' queue (a sorted set) and waiters (a hash) of the lock on
/// `key` under `prefix`, as the library names them on a single server.
pub fn queue_keys(prefix: Option<&str>, key: &str) -> (String, String) {
    let reserved = reserved(prefix);
    (
        format!("{reserved}queue:{key}"),
        format!("{reserved}waiters:{key}"),
    )
}

/// The fencing counter of `prefix` on a single server.
pub fn fence_key(prefix: Option<&str>) -> String {
    format!("{}fence", reserved(prefix))
}

/// The release channel of `prefix`.
pub fn release_channel(prefix: Option<&str>) -> String {
    format!("{}released", reserved(prefix))
}

/// Polls `check` until it returns true, failing the test after `within`.
/// For states that announce themselves with no event (a replication link
/// coming up, a cluster agreeing on its slots).
pub fn wait_until(what: &str, within: Duration, mut check: impl FnMut() -> bool) {
    let end = Instant::now() + within;
    while !check() {
        assert!(Instant::now() < end, "not within {within:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The value of `field` in an `INFO`-style reply.
pub fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_owned())
}

impl Server {
    /// Starts a replica of `master` and waits until its link is up.
    pub fn replica_of(master: &Server) -> Server {
        let port = master.port().to_string();
        let replica = Server::start_with(&["--replicaof", "127.0.0.1", &port]);
        wait_until("replication link up", Duration::from_secs(20), || {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut replica.conn())
                .unwrap();
            info_field(&info, "master_link_status").as_deref() == Some("up")
        });
        replica
    }
}

/// A private temporary directory, removed on drop.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        TempDir(support::temp_dir(name).unwrap())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Three sentinels watching `master` under the name "mymaster" (quorum 2,
/// down after 500 ms, failover timeout 3 s), killed on drop.
pub struct Sentinels {
    pub nodes: Vec<support::ThrowAwayServer>,
    _dir: TempDir,
}

impl Sentinels {
    pub fn watch(master: &Server) -> Sentinels {
        let dir = TempDir::new("sentinel");
        let nodes: Vec<_> = (0..3)
            .map(|i| {
                let port = TcpListener::bind("127.0.0.1:0")
                    .unwrap()
                    .local_addr()
                    .unwrap()
                    .port();
                let conf = dir.0.join(format!("sentinel-{i}.conf"));
                std::fs::write(
                    &conf,
                    format!(
                        "port {port}\nbind 127.0.0.1\ndaemonize no\nlogfile \"\"\ndir {}\n\
                         sentinel monitor mymaster 127.0.0.1 {} 2\n\
                         sentinel down-after-milliseconds mymaster 500\n\
                         sentinel failover-timeout mymaster 3000\n",
                        dir.0.display(),
                        master.port()
                    ),
                )
                .unwrap();
                let conf = conf.to_string_lossy().into_owned();
                support::ThrowAwayServer::launch(
                    &[&conf, "--sentinel"],
                    port,
                    "+monitor master",
                    START_TIMEOUT,
                )
                .unwrap()
            })
            .collect();
        let sentinels = Sentinels { nodes, _dir: dir };
        // A failover needs the sentinels to know each other and the replica.
        wait_until(
            "sentinels see each other and the replica",
            Duration::from_secs(30),
            || {
                sentinels.nodes.iter().all(|n| {
                    let mut c = redis::Client::open(n.url())
                        .unwrap()
                        .get_connection()
                        .unwrap();
                    let fields: Vec<String> = redis::cmd("SENTINEL")
                        .arg("MASTER")
                        .arg("mymaster")
                        .query(&mut c)
                        .unwrap();
                    let get = |name: &str| {
                        fields
                            .iter()
                            .position(|f| f == name)
                            .and_then(|i| fields.get(i + 1))
                            .cloned()
                    };
                    get("num-other-sentinels").as_deref() == Some("2")
                        && get("num-slaves").as_deref() == Some("1")
                })
            },
        );
        sentinels
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url()).collect()
    }
}

/// A three-master Redis Cluster (no replicas, or one per master), killed on
/// drop.
pub struct Cluster {
    pub nodes: Vec<support::ThrowAwayServer>,
    _dir: TempDir,
}

impl Cluster {
    pub fn start() -> Cluster {
        Cluster::start_with_replicas(0)
    }

    /// Three masters with `replicas` replicas each.
    pub fn start_with_replicas(replicas: usize) -> Cluster {
        Cluster::start_configured(replicas, &[])
    }

    /// Three masters with `replicas` replicas each, every node started
    /// with the arguments `extra` too.
    pub fn start_configured(replicas: usize, extra: &[&str]) -> Cluster {
        let (nodes, dir) = support::cluster::start_cluster(replicas, extra, START_TIMEOUT).unwrap();
        let dir = TempDir(dir);
        let cluster = Cluster { nodes, _dir: dir };
        cluster.await_ok();
        cluster
    }

    /// Until every live node says `cluster_state:ok` and agrees on the
    /// owner of every slot, for at most 30 s.
    pub fn await_ok(&self) {
        wait_until(
            "cluster_state:ok on every node",
            Duration::from_secs(30),
            || {
                let mut maps = Vec::new();
                for n in &self.nodes {
                    let Ok(mut c) = redis::Client::open(n.url()).unwrap().get_connection() else {
                        continue;
                    };
                    let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut c).unwrap();
                    if info_field(&info, "cluster_state").as_deref() != Some("ok") {
                        return false;
                    }
                    maps.push(slot_masters(&mut c));
                }
                maps.windows(2).all(|w| w[0] == w[1])
            },
        );
    }

    /// A plain connection to node `i`.
    pub fn conn(&self, i: usize) -> redis::Connection {
        redis::Client::open(self.nodes[i].url())
            .unwrap()
            .get_connection()
            .unwrap()
    }

    /// The node (index) that serves `slot` as a master.
    pub fn master_of(&self, slot: u16) -> usize {
        let mut c = self.live_conn();
        let port = slot_masters(&mut c)
            .into_iter()
            .find(|(from, to, _)| (*from..=*to).contains(&slot))
            .map(|(_, _, port)| port)
            .unwrap();
        self.nodes.iter().position(|n| n.port() == port).unwrap()
    }

    /// A replica (index) of the master `i`.
    pub fn replica_of(&self, i: usize) -> usize {
        let id = self.node_id(i);
        (0..self.nodes.len())
            .find(|&j| {
                let Ok(mut c) = redis::Client::open(self.nodes[j].url())
                    .unwrap()
                    .get_connection()
                else {
                    return false;
                };
                let me: String = redis::cmd("CLUSTER").arg("NODES").query(&mut c).unwrap();
                me.lines()
                    .any(|l| l.contains("myself") && l.contains("slave") && l.contains(&id))
            })
            .unwrap()
    }

    /// Node `i`'s cluster id.
    pub fn node_id(&self, i: usize) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.conn(i))
            .unwrap()
    }

    /// The slot of `key`.
    pub fn slot_of(&self, key: &str) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.live_conn())
            .unwrap()
    }

    fn live_conn(&self) -> redis::Connection {
        self.nodes
            .iter()
            .find_map(|n| redis::Client::open(n.url()).unwrap().get_connection().ok())
            .unwrap()
    }

    /// Promotes the replica `r` of its master with `CLUSTER FAILOVER` (a
    /// manual, coordinated failover), and waits until every node agrees.
    pub fn fail_over_to(&self, r: usize) {
        wait_until("the replica's link up", Duration::from_secs(30), || {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut self.conn(r))
                .unwrap();
            info_field(&info, "master_link_status").as_deref() == Some("up")
        });
        let promoted = || {
            let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut self.conn(r)).unwrap();
            matches!(role.first(), Some(redis::Value::BulkString(b)) if b == b"master")
        };
        // A manual failover the master does not take part in within its
        // timeout is dropped: asked again.
        for _ in 0..3 {
            let _: () = redis::cmd("CLUSTER")
                .arg("FAILOVER")
                .query(&mut self.conn(r))
                .unwrap();
            let end = Instant::now() + Duration::from_secs(10);
            while !promoted() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(50));
            }
            if promoted() {
                break;
            }
        }
        assert!(promoted(), "the replica was not promoted");
        self.await_ok();
    }

    /// Moves `slot` (and its keys) from master `from` to master `to`, as
    /// `redis-cli --cluster reshard` does, and tells every master.
    pub fn migrate_slot(&self, slot: u16, from: usize, to: usize) {
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        let (mut src, mut dst) = (self.conn(from), self.conn(to));
        let setslot = |c: &mut redis::Connection, how: &str, id: &str| {
            let _: () = redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg(how)
                .arg(id)
                .query(c)
                .unwrap();
        };
        setslot(&mut dst, "IMPORTING", &from_id);
        setslot(&mut src, "MIGRATING", &to_id);
        loop {
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(100)
                .query(&mut src)
                .unwrap();
            if keys.is_empty() {
                break;
            }
            let _: () = redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(self.nodes[to].port())
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&keys)
                .query(&mut src)
                .unwrap_or_else(|e| panic!("{e}: {}", self.both_sides(&keys, to)));
        }
        setslot(&mut dst, "NODE", &to_id);
        setslot(&mut src, "NODE", &to_id);
        for i in 0..self.nodes.len() {
            if i != from && i != to {
                if let Ok(mut c) = redis::Client::open(self.nodes[i].url())
                    .unwrap()
                    .get_connection()
                {
                    let _: redis::RedisResult<()> = redis::cmd("CLUSTER")
                        .arg("SETSLOT")
                        .arg(slot)
                        .arg("NODE")
                        .arg(&to_id)
                        .query(&mut c);
                }
            }
        }
        self.await_ok();
    }

    /// Where each of `keys` is, over every node (`ASKING`, so that an
    /// importing node answers): what a failed `MIGRATE` left.
    fn both_sides(&self, keys: &[String], to: usize) -> String {
        let mut out = String::new();
        for k in keys {
            let mut seen = Vec::new();
            for i in 0..self.nodes.len() {
                let Ok(mut c) = redis::Client::open(self.nodes[i].url())
                    .unwrap()
                    .get_connection()
                else {
                    continue;
                };
                let _: redis::RedisResult<()> = redis::cmd("ASKING").query(&mut c);
                let kind: String = redis::cmd("TYPE").arg(k).query(&mut c).unwrap_or_default();
                let pttl: i64 = redis::cmd("PTTL").arg(k).query(&mut c).unwrap_or(-3);
                if kind != "none" {
                    seen.push(format!("node {i}: {kind}, PTTL {pttl}"));
                }
            }
            out += &format!("{k} (target node {to}): {seen:?}; ");
        }
        out
    }

    /// The shard channels with subscribers, over every node.
    pub fn shard_channels(&self) -> Vec<String> {
        let mut all = Vec::new();
        for n in &self.nodes {
            if let Ok(mut c) = redis::Client::open(n.url()).unwrap().get_connection() {
                let mut some: Vec<String> = redis::cmd("PUBSUB")
                    .arg("SHARDCHANNELS")
                    .query(&mut c)
                    .unwrap_or_default();
                all.append(&mut some);
            }
        }
        all.sort();
        all
    }

    /// Calls of EVALSHA every live node has run so far.
    pub fn evalsha_calls(&self) -> u64 {
        let mut n = 0;
        for node in &self.nodes {
            if let Ok(mut c) = redis::Client::open(node.url()).unwrap().get_connection() {
                let info: String = redis::cmd("INFO")
                    .arg("commandstats")
                    .query(&mut c)
                    .unwrap();
                n += info
                    .lines()
                    .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
                    .and_then(|rest| rest.split(',').next())
                    .map_or(0, |n| n.parse::<u64>().unwrap());
            }
        }
        n
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url()).collect()
    }

    /// A pool of cluster connections, as a user would build it.
    pub fn pool(&self) -> r2d2::Pool<redis::cluster::ClusterClient> {
        let client = redis::cluster::ClusterClient::builder(self.urls())
            .connection_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        r2d2::Pool::builder()
            .max_size(4)
            .test_on_check_out(false)
            .build(client)
            .unwrap()
    }

    /// Every key on every node.
    pub fn all_keys(&self) -> Vec<String> {
        let mut keys = Vec::new();
        for n in &self.nodes {
            let mut c = redis::Client::open(n.url())
                .unwrap()
                .get_connection()
                .unwrap();
            let mut some: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
            keys.append(&mut some);
        }
        keys.sort();
        keys
    }
}

/// `CLUSTER SLOTS` as (first slot, last slot, master port), sorted.
fn slot_masters(c: &mut redis::Connection) -> Vec<(u16, u16, u16)> {
    let slots: Vec<redis::Value> = redis::cmd("CLUSTER").arg("SLOTS").query(c).unwrap();
    let mut out: Vec<(u16, u16, u16)> = slots
        .iter()
        .filter_map(|range| {
            let redis::Value::Array(parts) = range else {
                return None;
            };
            let int = |v: &redis::Value| match v {
                redis::Value::Int(n) => Some(u16::try_from(*n).unwrap()),
                _ => None,
            };
            let redis::Value::Array(master) = parts.get(2)? else {
                return None;
            };
            Some((int(&parts[0])?, int(&parts[1])?, int(master.get(1)?)?))
        })
        .collect();
    out.sort();
    out
}

/// Starts `n` independent servers (Redlock masters).
pub fn servers(n: usize) -> Vec<Server> {
    (0..n).map(|_| Server::start()).collect()
}

/// How many of `servers` have `key`.
pub fn holders_of(servers: &[Server], key: &str) -> usize {
    servers
        .iter()
        .filter(|s| {
            redis::cmd("EXISTS")
                .arg(key)
                .query::<bool>(&mut s.conn())
                .unwrap()
        })
        .count()
}

/// A builder over all `servers` as Redlock instances, each with its own pool.
pub fn redlock_builder(servers: &[Server]) -> Builder {
    let mut b: Option<Builder> = None;
    for s in servers {
        let pool = redmutex::pool(&s.url()).unwrap();
        b = Some(match b {
            None => Locker::builder(pool),
            Some(b) => b.instance(pool),
        });
    }
    b.expect("at least one server")
}

/// The owner token a lock value `<token>:<fence>:<metadata>` names.
pub fn owner_in(value: &str) -> &str {
    value.split(':').next().unwrap_or("")
}

/// The owner token of the lock at `key` on `server`, if any.
pub fn owner_of(server: &Server, key: &str) -> Option<String> {
    let v: Option<String> = redis::cmd("GET")
        .arg(key)
        .query(&mut server.conn())
        .unwrap();
    v.map(|v| owner_in(&v).to_owned())
}

/// The fencing token a lock value `<token>:<fence>:<metadata>` names.
pub fn fence_in(value: &str) -> Option<u64> {
    value.split(':').nth(1)?.parse().ok()
}

/// The fencing token stored in the lock at `key` on `server`.
pub fn fence_of(server: &Server, key: &str) -> u64 {
    let v: String = redis::cmd("GET")
        .arg(key)
        .query(&mut server.conn())
        .unwrap();
    fence_in(&v).unwrap()
}

/// Every key of `server` and its value (strings) or type, sorted.
pub fn dump(server: &Server) -> Vec<(String, String)> {
    let mut c = server.conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
    let mut out: Vec<(String, String)> = keys
        .into_iter()
        .map(|k| {
            let v: String = redis::cmd("TYPE").arg(&k).query(&mut c).unwrap();
            let v = if v == "string" {
                redis::cmd("GET").arg(&k).query(&mut c).unwrap()
            } else {
                v
            };
            (k, v)
        })
        .collect();
    out.sort();
    out
}

/// An owner token that is not any locker's.
pub const SOMEONE_ELSE: &str = "ffffffffffffffffffffffffffffffff";

/// Writes a lock at `key` as another owner would, for `px` milliseconds.
pub fn lock_as_someone_else(server: &Server, key: &str, px: u64) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(format!("{SOMEONE_ELSE}:1:someone else"))
        .arg("PX")
        .arg(px)
        .query(&mut server.conn())
        .unwrap();
}

/// One thread per entry of `lockers`, started together, each `rounds` times
/// locking `k` and bumping a counter on `server` with a non-atomic GET then
/// SET, which loses updates unless the lock excludes. Returns the counter.
pub fn count_under_lock(lockers: &[Locker], k: &str, server: &Server, rounds: usize) -> u64 {
    let counter = format!("{k}-counter");
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(lockers.len()));
    let threads: Vec<_> = lockers
        .iter()
        .cloned()
        .map(|locker| {
            let (k, counter, barrier) = (k.to_owned(), counter.clone(), barrier.clone());
            let mut conn = server.conn();
            std::thread::spawn(move || {
                barrier.wait();
                for _ in 0..rounds {
                    let g = locker.lock(&k).unwrap();
                    let v: Option<u64> = redis::cmd("GET").arg(&counter).query(&mut conn).unwrap();
                    let _: () = redis::cmd("SET")
                        .arg(&counter)
                        .arg(v.unwrap_or(0) + 1)
                        .query(&mut conn)
                        .unwrap();
                    g.unlock().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    redis::cmd("GET")
        .arg(&counter)
        .query(&mut server.conn())
        .unwrap()
}

/// A unique key name for this test (tests share no keys, servers or state).
pub fn key(name: &str) -> String {
    format!("{name}-{}", std::process::id())
}

/// Runs `f` and returns its result with how long it took.
pub fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let out = f();
    (out, start.elapsed())
}

/// Subscribes to keyspace events of `key` (`flags` as in
/// `notify-keyspace-events`, e.g. "Kg" for generic commands such as PEXPIRE
/// and DEL, "Kx" for expiries) and returns a receiver of event names.
pub fn keyspace_events(server: &Server, key: &str, flags: &str) -> mpsc::Receiver<String> {
    server.config_set("notify-keyspace-events", flags);
    let mut conn = server.conn();
    conn.set_read_timeout(None).unwrap();
    let channel = format!("__keyspace@0__:{key}");
    let (tx, rx) = mpsc::channel();
    let (ready_tx, ready_rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("keyspace-events".into())
        .spawn(move || {
            let mut pubsub = conn.as_pubsub();
            pubsub.subscribe(&channel).unwrap();
            ready_tx.send(()).unwrap();
            while let Ok(msg) = pubsub.get_message() {
                let event: String = msg.get_payload().unwrap_or_default();
                if tx.send(event).is_err() {
                    return;
                }
            }
        })
        .unwrap();
    ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    rx
}

/// Waits for the next keyspace event named `want`, skipping others.
pub fn next_event(rx: &mpsc::Receiver<String>, want: &str, within: Duration) {
    assert!(
        saw_event(rx, want, within),
        "no {want:?} event within {within:?}"
    );
}

/// Whether the keyspace event named `want` comes within `within`,
/// skipping others.
pub fn saw_event(rx: &mpsc::Receiver<String>, want: &str, within: Duration) -> bool {
    let end = Instant::now() + within;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(e) if e == want => return true,
            Ok(_) => continue,
            Err(_) => return false,
        }
    }
}

/// A waiter's thread: its `lock_timeout` result and how long it took.
pub type Waiting = std::thread::JoinHandle<(Result<redmutex::Guard, redmutex::Error>, Duration)>;

/// Starts `waiter.lock_timeout(k, wait)` on a thread (someone else holds
/// `k`), and returns once `attempts` attempts have failed. A locker's first
/// waiter makes two before it waits: one, then one more as soon as its
/// release listener is up (a release may have slipped by meanwhile).
pub fn wait_behind(
    server: &Server,
    waiter: &Locker,
    k: &str,
    wait: Duration,
    attempts: u64,
) -> Waiting {
    let before = server.evalsha_calls();
    let (waiter, k2) = (waiter.clone(), k.to_owned());
    let t = std::thread::spawn(move || {
        let start = Instant::now();
        (waiter.lock_timeout(&k2, wait), start.elapsed())
    });
    wait_until("the waiter's attempts", Duration::from_secs(20), || {
        server.evalsha_calls() >= before + attempts
    });
    t
}

/// Checks that a waiter behind a lock just released (with a minute of
/// backoff and TTL, and a 30 s wait) got it long before its backoff or its
/// wait could have ended: the release woke it.
pub fn woken_by_the_release(waiting: Waiting) {
    let (got, took) = waiting.join().expect("the waiter's thread");
    assert!(got.is_ok(), "{got:?}");
    assert!(
        took < Duration::from_secs(15),
        "woken by its deadline ({took:?}), not by the release"
    );
}

/// Waits until one waiter is queued for the lock `k` (no prefix) and a
/// release listener is subscribed: its start-up is behind it.
pub fn queued_and_listening(server: &Server, k: &str) {
    wait_until(
        "the waiter queued and listening",
        Duration::from_secs(20),
        || {
            server.release_subscribers() >= 1
                && redis::cmd("ZCARD")
                    .arg(queue_keys(None, k).0)
                    .query::<u64>(&mut server.conn())
                    .unwrap_or(0)
                    == 1
        },
    );
}

/// Waits until right after a script call on `server`: with a waiter whose
/// backoff is long, one of its refreshes of its place (one a second), so
/// that none comes for a while.
pub fn after_a_call(server: &Server) {
    let calls = server.evalsha_calls();
    wait_until("a refresh of the waiter", Duration::from_secs(20), || {
        server.evalsha_calls() > calls
    });
}

/// A locker built by `builder` whose lease-change callback records the
/// reason of every loss, and those reasons.
pub fn recording_losses(
    builder: Builder,
) -> (
    Locker,
    std::sync::Arc<std::sync::Mutex<Vec<redmutex::LeaseChangeReason>>>,
) {
    let told = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = std::sync::Arc::clone(&told);
    let locker = builder
        .on_lease_change(move |c| {
            if c.to() == redmutex::LeaseState::Lost {
                sink.lock().unwrap().push(c.reason());
            }
        })
        .build()
        .unwrap();
    (locker, told)
}

/// The names of the holds `locker` lists (`LockInfo::key`), in order.
pub fn listed_keys(locker: &Locker) -> Vec<String> {
    locker
        .locks()
        .unwrap()
        .iter()
        .map(|i| i.key().to_owned())
        .collect()
}

/// Runs `f` on another thread and returns what it returned: a probe of a
/// hold this thread took, which this thread itself would be refused
/// (`Error::AlreadyHeld`: a thread is never left to wait for itself).
pub fn elsewhere<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| s.spawn(f).join().unwrap())
}

/// The name the fan-out threads of a Redlock locker carry (Linux keeps its
/// first 15 bytes).
const FAN_OUT_NAME: &str = "redmutex-redloc";

/// The ids of this process's Redlock fan-out threads (Linux: read from
/// `/proc`; a test that counts them needs a test binary of its own).
pub fn fan_out_threads() -> std::collections::BTreeSet<u64> {
    let tasks = std::fs::read_dir("/proc/self/task").expect("read /proc/self/task");
    tasks
        .filter_map(|t| {
            let t = t.ok()?;
            let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
            let tid = t.file_name().to_str()?.parse().ok()?;
            comm.trim().starts_with(FAN_OUT_NAME).then_some(tid)
        })
        .collect()
}

/// How many waiters the queue `queue` (a sorted set's key) holds.
pub fn queued_in(server: &Server, queue: &str) -> u64 {
    redis::cmd("ZCARD")
        .arg(queue)
        .query(&mut server.conn())
        .unwrap()
}

/// The values of the next `n` states `observer` yields (`None`: no leader).
pub fn observed(observer: &mut redmutex::Observer, n: usize) -> Vec<Option<String>> {
    (0..n)
        .map(|_| {
            observer
                .next()
                .unwrap()
                .unwrap()
                .map(|l| l.value().to_owned())
        })
        .collect()
}

/// Releases `held` once `waiter` (another locker, as another process,
/// with a minute of backoff) waits for `keys` (several: a multi-key lock
/// does not queue; a minute at most) and `listening` says it listens for
/// releases; returns the waiter's guard after checking that it got the lock
/// long before its backoff or the end of its wait (its last attempt) could
/// have let it: the release's announcement woke it.
pub fn woken_by_the_announcement(
    held: redmutex::Guard,
    waiter: &Locker,
    keys: &[String],
    listening: (&str, &mut dyn FnMut() -> bool),
) -> redmutex::Guard {
    let t = {
        let (waiter, keys) = (waiter.clone(), keys.to_vec());
        std::thread::spawn(move || {
            let got = waiter.lock_all_timeout(&keys, Duration::from_secs(60));
            (got, Instant::now())
        })
    };
    let (what, check) = listening;
    wait_until(what, Duration::from_secs(20), check);
    let released = Instant::now();
    drop(held);
    let (got, at) = t.join().expect("the waiter's thread");
    let took = at.saturating_duration_since(released);
    let guard = got.unwrap();
    assert!(
        took < Duration::from_secs(15),
        "woken after {took:?}: by its backoff, not by the release"
    );
    guard
}

/// A locker over `pool` with a minute of TTL and of backoff: only a
/// release can get its waiters the lock quickly.
pub fn slow_locker_over<M>(pool: r2d2::Pool<M>) -> Locker
where
    M: r2d2::ManageConnection,
    M::Connection: redis::ConnectionLike,
{
    Locker::builder(pool)
        .ttl(Duration::from_secs(60))
        .backoff(Backoff::fixed(Duration::from_secs(60)))
        .build()
        .unwrap()
}

/// The files of a TLS server made here: its certificate (for 127.0.0.1
/// and localhost), its key, and the authority that signed it, written to
/// a directory; and that authority's PEM, for the clients to trust.
pub struct TlsFiles {
    pub cert: String,
    pub key: String,
    pub ca: String,
    pub ca_pem: String,
}

impl TlsFiles {
    /// Makes an authority and a server certificate it signed, in `dir`.
    pub fn new(dir: &std::path::Path) -> TlsFiles {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "redmutex test authority");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let server_key = KeyPair::generate().unwrap();
        let server_params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
        let cert = server_params.signed_by(&server_key, &ca, &ca_key).unwrap();
        let write = |name: &str, pem: &str| {
            let path = dir.join(name);
            std::fs::write(&path, pem).unwrap();
            path.to_string_lossy().into_owned()
        };
        TlsFiles {
            cert: write("server.crt", &cert.pem()),
            key: write("server.key", &server_key.serialize_pem()),
            ca: write("ca.crt", &ca.pem()),
            ca_pem: ca.pem(),
        }
    }

    /// The server's arguments: these files, clients not asked for theirs.
    pub fn server_args(&self) -> Vec<&str> {
        vec![
            "--tls-cert-file",
            &self.cert,
            "--tls-key-file",
            &self.key,
            "--tls-ca-cert-file",
            &self.ca,
            "--tls-auth-clients",
            "no",
        ]
    }
}
