//! The protocol's model (`redmutex-testkit`'s `model::single`) run step by
//! step against the real scripts: seeded random walks through the model's
//! actions, where every request the model runs is also run on a real
//! `redis-server` through the library's own callers (`RawLock::acquire`,
//! `renew`, `release`, `dequeue`), and the two must agree after every step:
//! granted or not, renewed or not, to whom a release handed the lock, the
//! fencing floor a refusal reports, who holds the lock with which token
//! (tokens compared by order: each real token stands for the model token
//! of the same grant), the order of the live waiters, and how many
//! guarded writes (`RawLock::run_if_held`) landed. A model that
//! drifts from the scripts fails here.
//!
//! Time is the model's: the real TTL and stays are hours long, and when
//! the model's clock makes the lock or a waiter's stay run out, the test
//! makes it so on the server (deletes the key, marks the entry as past its
//! stay); so too when the model expires the key early (a server clock fast
//! against the clients'). A snapshot and a restore are `DUMP` and `RESTORE` of the lock's
//! keys. Every other walk runs with a lock-delay: the lock-delay mark must
//! be there (and keep the key from everyone) exactly when the model's is,
//! and when the model's runs out, the test deletes it on the server. `REDMUTEX_MODEL_WALKS` sets the number of walks,
//! `REDMUTEX_MODEL_FIRST` the first seed, and `REDMUTEX_MODEL_TRACE=<seed>`
//! prints that walk's steps.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::cast_possible_truncation
)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Commands;
use redmutex_testkit::model::single::{Action, Protocol, Reply, Req, State};
use redmutex_testkit::ThrowAwayServer;
use stateright::Model;

use super::{Acquisition, Outcome, Queue, RawLock};
use crate::lease::watchdog::Renewal;
use crate::lease::Lease;
use crate::protocol::value::LockValue;
use crate::Locker;

/// One model millisecond on the server: an hour, so that nothing expires
/// by the real clock during a walk.
const SCALE: u64 = 3_600_000;
const KEY: &str = "walk";
/// What the walk's guarded writes write: a count of those that landed.
const DATA: &str = "walk-data";

/// A small, seeded generator (SplitMix64): reproducible walks without a
/// dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % n as u64) as usize
    }
}

/// A key's `DUMP`, and its PTTL (0: none).
type Dump = (Vec<u8>, i64);

/// How the test marks a waiter's entry as past its stay: `<at>:<stay>`
/// with both 0, before its `<ttl>:<metadata>`.
const PAST_STAY: &str = "0:0:";

/// The real side of a walk.
struct Real {
    shared: Arc<RawLock>,
    conn: redis::Connection,
    clients: Vec<Arc<Acquisition>>,
    /// The lock's key, its fencing counter, queue and waiters, as the
    /// library names them.
    lock: String,
    counter: String,
    queue: String,
    waiters: String,
    /// The lock-delay marks of the lock (a hash; the lock key's field).
    marks: String,
    /// Each model token, and the real token minted for the same grant.
    tokens: BTreeMap<u64, u64>,
    /// `DUMP`s of the lock's keys, with their PTTL.
    snapshot: Vec<(String, Option<Dump>)>,
    /// Guarded writes that landed, and that were refused.
    writes: [usize; 2],
}

impl Real {
    fn new(shared: Arc<RawLock>, conn: redis::Connection, clients: usize) -> Real {
        let clients: Vec<Arc<Acquisition>> = (0..clients)
            .map(|_| Arc::new(shared.prepare(&[KEY]).unwrap()))
            .collect();
        let a = &clients[0];
        Real {
            lock: a.keys.locks[0].clone(),
            counter: a.keys.fence.clone(),
            queue: a.keys.queue.clone(),
            waiters: a.keys.waiters.clone(),
            marks: a.keys.delays[0].clone(),
            shared,
            conn,
            clients,
            tokens: BTreeMap::new(),
            snapshot: Vec::new(),
            writes: [0, 0],
        }
    }

    fn real_token(&self, model: u64, what: &str) -> u64 {
        if model == 0 {
            return 0;
        }
        *self
            .tokens
            .get(&model)
            .unwrap_or_else(|| panic!("{what}: model token {model} was never minted"))
    }

    /// Records a grant's tokens: the real ones must rise as the model's do.
    fn minted(&mut self, model: u64, real: u64) {
        let (last_model, last_real) = self
            .tokens
            .iter()
            .next_back()
            .map_or((0, 0), |(m, r)| (*m, *r));
        assert!(
            model > last_model && real > last_real,
            "tokens out of order: model {last_model} then {model}, real {last_real} then {real}"
        );
        self.tokens.insert(model, real);
    }

    fn client_of(&self, token: &str) -> usize {
        self.clients
            .iter()
            .position(|a| a.token.as_str() == token)
            .expect("a token of ours")
    }

    /// Runs client `c`'s request on the server; says what the model's reply
    /// should be, and to whom a release handed the lock.
    fn run(&mut self, c: usize, req: Req) -> (Option<Reply>, Option<(usize, u64)>) {
        let a = &self.clients[c];
        match req {
            Req::Acquire => {
                let stay = Duration::from_millis(2 * SCALE);
                match self.shared.acquire(a, Queue::Join(stay)).unwrap() {
                    Outcome::Granted { fence, .. } => (Some(Reply::Granted(fence)), None),
                    Outcome::Busy { .. } => {
                        let floor = a.floor.load(std::sync::atomic::Ordering::SeqCst);
                        (Some(Reply::Busy(floor)), None)
                    }
                }
            }
            Req::Renew => {
                let ttl = Duration::from_millis(3 * SCALE);
                let lease = Lease::new(Instant::now(), ttl, None);
                match self.shared.renew(&lease, a, 0, Some(ttl)).unwrap() {
                    Renewal::Confirmed => (Some(Reply::Renewed), None),
                    Renewal::Lost => (Some(Reply::NotOurs), None),
                    other => panic!("renewal: {other:?}"),
                }
            }
            Req::Release => {
                let (_, handed) = self.shared.release(a).unwrap();
                let handed = handed.map(|(token, fence)| (self.client_of(&token), fence));
                (None, handed)
            }
            Req::Dequeue => {
                self.shared.dequeue(a);
                // Its caller is not told of a hand-over (the script
                // announces it): a lock with a token not seen before is one.
                let handed = self
                    .holder()
                    .filter(|(_, fence)| !self.tokens.values().any(|t| t == fence));
                (None, handed)
            }
            Req::Write(_) => {
                let mut write = redis::pipe();
                write.incr(DATA, 1);
                let landed = self.shared.run_if_held(a, &write).unwrap().is_some();
                self.writes[usize::from(!landed)] += 1;
                let reply = if landed {
                    Reply::Written
                } else {
                    Reply::NotOurs
                };
                (Some(reply), None)
            }
        }
    }

    /// Makes the server's state what the model's clock says: a lock or a
    /// stay that ran out by the model's time runs out here too.
    fn expire(&mut self, s: &State) {
        if s.server.lock.as_ref().is_some_and(|l| l.expires <= s.now) {
            let _: () = self.conn.del(&self.lock).unwrap();
        }
        if s.server.mark.is_some_and(|till| till <= s.now) {
            let _: () = self.conn.hdel(&self.marks, &self.lock).unwrap();
        }
        for &(c, until) in &s.server.queue {
            if until < s.now {
                let token = self.clients[c].token.as_str();
                let entry: Option<String> = self.conn.hget(&self.waiters, token).unwrap();
                if let Some(entry) = entry {
                    // `<at>:<stay>:<ttl>:<metadata>`: keep the last two.
                    let rest: Vec<&str> = entry.splitn(3, ':').collect();
                    let past = format!("{PAST_STAY}{}", rest[2]);
                    let _: () = self.conn.hset(&self.waiters, token, past).unwrap();
                }
            }
        }
    }

    fn save(&mut self) {
        let mut snapshot = Vec::new();
        for k in [
            &self.lock,
            &self.counter,
            &self.queue,
            &self.waiters,
            &self.marks,
        ] {
            let dump: Option<Vec<u8>> = redis::cmd("DUMP").arg(k).query(&mut self.conn).unwrap();
            let pttl: i64 = self.conn.pttl(k).unwrap();
            snapshot.push((k.clone(), dump.map(|d| (d, pttl.max(0)))));
        }
        self.snapshot = snapshot;
    }

    fn restore(&mut self) {
        for (k, kept) in &self.snapshot {
            let _: () = self.conn.del(k).unwrap();
            if let Some((dump, pttl)) = kept {
                let _: () = redis::cmd("RESTORE")
                    .arg(k)
                    .arg(*pttl)
                    .arg(dump.as_slice())
                    .query(&mut self.conn)
                    .unwrap();
            }
        }
    }

    /// Who holds the lock on the server, and its token (read with the
    /// library's own parser of lock values).
    fn holder(&mut self) -> Option<(usize, u64)> {
        let value: Option<String> = self.conn.get(&self.lock).unwrap();
        value.map(|v| {
            let value = LockValue::parse(&v).expect("a lock value");
            (self.client_of(value.token), value.fence)
        })
    }

    /// The server's state must be the model's: who holds the lock, with
    /// which token, and the live waiters in order.
    fn agree(&mut self, s: &State, step: &str) {
        let real = self.holder();
        let model = s
            .server
            .lock
            .as_ref()
            .filter(|l| l.expires > s.now)
            .map(|l| (l.owner, self.real_token(l.fence, step)));
        assert_eq!(real, model, "{step}: the holder (client, real token)");
        let queued: Vec<String> = self.conn.zrange(&self.queue, 0, -1).unwrap();
        let mut live = Vec::new();
        for token in queued {
            let entry: Option<String> = self.conn.hget(&self.waiters, &token).unwrap();
            if entry.is_some_and(|e| !e.starts_with(PAST_STAY)) {
                live.push(self.client_of(&token));
            }
        }
        let model: Vec<usize> = s
            .server
            .queue
            .iter()
            .filter(|(_, until)| *until >= s.now)
            .map(|(c, _)| *c)
            .collect();
        assert_eq!(live, model, "{step}: the live waiters, in order");
        let written: Option<u8> = self.conn.get(DATA).unwrap();
        assert_eq!(
            written.unwrap_or(0),
            s.written,
            "{step}: the guarded writes that landed"
        );
        let marked: bool = self.conn.hexists(&self.marks, &self.lock).unwrap();
        let model = s.server.mark.is_some_and(|till| till > s.now);
        assert_eq!(marked, model, "{step}: the lock-delay mark");
    }
}

/// One walk of `steps` random actions from the model's initial state,
/// printing each step when `trace`; says how many requests it ran, and
/// how many guarded writes landed and were refused, and whether a
/// lock-delay refused one.
fn walk(
    locker: &Locker,
    conn: redis::Connection,
    seed: u64,
    steps: usize,
    trace: bool,
) -> (usize, [usize; 2], bool) {
    let delaying = !locker.shared().config.lock_delay.is_zero();
    let model = Protocol {
        clients: 3,
        ttl: 3,
        stay: 2,
        horizon: 40,
        grants: 4,
        writes: 2,
        leavers: 2,
        restores: true,
        flaw: None,
        drift: 1,
        skew: 1,
        fair: None,
        doubt: true,
        delay: u64::from(delaying),
    };
    let mut real = Real::new(Arc::clone(locker.shared()), conn, model.clients);
    let _: () = redis::cmd("FLUSHALL").query(&mut real.conn).unwrap();
    let mut rng = Rng(seed);
    let mut s = model.init_states().remove(0);
    let mut runs = 0;
    let mut actions = Vec::new();
    for step in 0..steps {
        actions.clear();
        model.actions(&s, &mut actions);
        if actions.is_empty() {
            break;
        }
        // Time, deaths and restores are picked less often than the
        // clients' steps, so that a walk does more than wait.
        let mut action = actions[rng.below(actions.len())];
        for _ in 0..3 {
            if !matches!(
                action,
                Action::Tick | Action::Expire | Action::Die(_) | Action::Save | Action::Restore
            ) {
                break;
            }
            action = actions[rng.below(actions.len())];
        }
        let at = format!("seed {seed}, step {step}, {action:?}");
        if trace {
            eprintln!("{at}");
        }
        let before = s.clone();
        s = model.next_state(&s, action).expect("an enabled action");
        match action {
            Action::Run(c) => {
                runs += 1;
                let (req, _) = before.clients[c].sent.expect("a request to run");
                let (reply, handed) = real.run(c, req);
                let expected = s.clients[c].reply.map(|(r, _)| r);
                match (expected, reply) {
                    (Some(Reply::Granted(m)), Some(Reply::Granted(r))) => real.minted(m, r),
                    (Some(Reply::Busy(m)), Some(Reply::Busy(r))) => {
                        assert_eq!(real.real_token(m, &at), r, "{at}: the floor");
                    }
                    (m, r) => assert_eq!(m, r, "{at}: the reply"),
                }
                // A hand-over: the model's grantee is told of it.
                let model_handed = s
                    .clients
                    .iter()
                    .enumerate()
                    .find(|(i, cl)| cl.handed.is_some() && cl.handed != before.clients[*i].handed)
                    .map(|(i, cl)| (i, cl.handed.unwrap_or_default()));
                match (model_handed, handed) {
                    (Some((m_to, m)), Some((r_to, r))) => {
                        assert_eq!(m_to, r_to, "{at}: handed to");
                        real.minted(m, r);
                    }
                    (m, r) => assert_eq!(
                        m.is_some(),
                        r.is_some(),
                        "{at}: a hand-over (model {m:?}, real {r:?}); before: {before:?}"
                    ),
                }
            }
            Action::Save => real.save(),
            Action::Restore => real.restore(),
            // The server's clock ran fast: the key goes before its time.
            Action::Expire => {
                let _: () = real.conn.del(&real.lock).unwrap();
            }
            _ => {}
        }
        real.expire(&s);
        real.agree(&s, &at);
    }
    (runs, real.writes, s.delayed)
}

/// A number from the environment, if set.
fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn the_model_and_the_real_scripts_agree_step_by_step() {
    let server = ThrowAwayServer::start(&[], Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("the tests need a real Redis server: {e}"));
    let client = redis::Client::open(server.url()).unwrap();
    let locker = Locker::new(crate::pool(&server.url()).unwrap());
    // Its delay only needs to outlast a walk: the test ends it.
    let delaying = Locker::builder(crate::pool(&server.url()).unwrap())
        .lock_delay(Duration::from_millis(SCALE))
        .build()
        .unwrap();
    let walks =
        env("REDMUTEX_MODEL_WALKS").unwrap_or(if cfg!(debug_assertions) { 300 } else { 2000 });
    let first = env("REDMUTEX_MODEL_FIRST").unwrap_or(0);
    // `REDMUTEX_MODEL_TRACE=<seed>` prints that walk's steps.
    let trace = env("REDMUTEX_MODEL_TRACE");
    let started = Instant::now();
    let (mut runs, mut writes, mut delayed) = (0, [0, 0], 0);
    for seed in first..first + walks {
        let conn = client.get_connection().unwrap();
        let locker = if seed % 2 == 1 { &delaying } else { &locker };
        let (r, [landed, refused], was_delayed) = walk(locker, conn, seed, 60, trace == Some(seed));
        runs += r;
        writes[0] += landed;
        writes[1] += refused;
        delayed += usize::from(was_delayed);
    }
    eprintln!(
        "model vs redis-server: {walks} walks of up to 60 steps (every other one with a \
         lock-delay), {runs} requests run on both ({} guarded writes landed, {} refused), all \
         agreed ({delayed} walks with a lock-delay refusal), in {:.1?}",
        writes[0],
        writes[1],
        started.elapsed()
    );
    assert!(
        writes[0] > 0 && writes[1] > 0,
        "the walks wrote and were refused"
    );
    assert!(delayed > 0, "no walk reached a lock-delay refusal");
}
