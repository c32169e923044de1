//! A worker's linearizability workloads (see `linear.rs` at the suite's
//! root): a thread whose sections read, hold and write the registers and
//! the set, and a thread that reads the registers with plain `GET`s at
//! random moments. Every operation is recorded when invoked and when it
//! completes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use redis::{Connection, Value};
use redmutex::{fence, Error};

use super::rounds::{leave, take};
use super::{Lock, Recorder, Resource, Rng, Settings};
use crate::history::{self, now_ns};
use crate::linear::{
    line, process, History, Outcome, Workloads, CONTROL_KEY, FENCE_KEY, GUARDED_KEY, LOCK, READER,
    SET_KEY, SIZE_KEY, WRITER,
};

/// Starts the workloads' threads, as the scenario asks ([`Workloads`]).
pub(super) fn spawn(
    settings: &Settings,
    rec: &Arc<Recorder>,
    lock: &Arc<dyn Lock>,
    stop: &Arc<AtomicBool>,
    threads: &mut Vec<JoinHandle<()>>,
) {
    let w = Workloads::from_env();
    if w == Workloads::None {
        return;
    }
    let registers = w == Workloads::All;
    let (rec2, lock, stop2, s) = (
        Arc::clone(rec),
        Arc::clone(lock),
        Arc::clone(stop),
        settings.clone(),
    );
    threads.push(
        std::thread::Builder::new()
            .name("worker-linear".into())
            .spawn(move || {
                let mut res = Resource::open(&s.resource_url);
                let mut w = Writer::new(&s, registers);
                while !stop2.load(Ordering::SeqCst) {
                    w.round(&*lock, &rec2, &mut res);
                }
            })
            .expect("spawn a thread"),
    );
    if registers {
        let (rec, stop, s) = (Arc::clone(rec), Arc::clone(stop), settings.clone());
        threads.push(
            std::thread::Builder::new()
                .name("worker-reads".into())
                .spawn(move || reads(&s, &rec, &stop))
                .expect("spawn a thread"),
        );
    }
}

/// A plain connection with both timeouts set; `None` if it cannot be had.
fn connect(url: &str, timeout: Duration) -> Option<Connection> {
    let c = redis::Client::open(url)
        .ok()?
        .get_connection_with_timeout(timeout)
        .ok()?;
    c.set_read_timeout(Some(timeout)).ok()?;
    c.set_write_timeout(Some(timeout)).ok()?;
    Some(c)
}

/// Runs `f` on the connection in `slot` (opened on `url` if none); a
/// connection that failed is dropped (a late reply may still come on it).
/// `None` when no connection could be had (nothing was sent).
fn on<T>(
    slot: &mut Option<Connection>,
    url: &str,
    timeout: Duration,
    f: impl FnOnce(&mut Connection) -> redis::RedisResult<T>,
) -> Option<redis::RedisResult<T>> {
    if slot.is_none() {
        *slot = connect(url, timeout);
    }
    let r = f(slot.as_mut()?);
    if r.is_err() {
        *slot = None;
    }
    Some(r)
}

/// A command's outcome: a server's error reply applied nothing; no reply
/// (a timeout, a dropped connection) may have applied it.
fn outcome_of<T>(r: Option<&redis::RedisResult<T>>) -> Outcome {
    match r {
        Some(Ok(_)) => Outcome::Ok,
        Some(Err(e)) if e.code().is_none() => Outcome::Info,
        _ => Outcome::Fail,
    }
}

/// The library's outcome of a guarded or fenced run: `Lost` ran nothing,
/// nor did a pool error (no connection) or input it refused; an error
/// reply of the server's to the one command ran nothing; anything else may
/// have run.
fn library_outcome(r: &Result<Vec<Value>, Error>) -> Outcome {
    match r {
        Ok(_) => Outcome::Ok,
        Err(Error::Lost { .. } | Error::Pool(_) | Error::InvalidInput(_)) => Outcome::Fail,
        Err(Error::Redis(e)) if e.code().is_some() => Outcome::Fail,
        Err(_) => Outcome::Info,
    }
}

/// The sections' side.
struct Writer {
    registers: bool,
    id: u32,
    p: u64,
    n: u64,
    lock_url: String,
    resource_url: String,
    io: Duration,
    lock_conn: Option<Connection>,
    set_conn: Option<Connection>,
    rng: Rng,
}

impl Writer {
    fn new(s: &Settings, registers: bool) -> Writer {
        Writer {
            registers,
            id: s.id,
            p: process(s.id, WRITER),
            n: 0,
            lock_url: s.lock_urls.first().cloned().unwrap_or_default(),
            resource_url: s.resource_url.clone(),
            io: s.io,
            lock_conn: None,
            set_conn: None,
            rng: Rng::new(u64::from(s.id) << 8 | 0x11),
        }
    }

    /// Reads register `h` for a compare-and-set to `to`: records its
    /// invocation (at the read's) once the read returned; `false` when it
    /// failed (nothing is written then).
    fn read_for_cas(&mut self, rec: &Recorder, h: History, key: &str, to: u64) -> bool {
        let call = now_ns();
        let (url, io) = (self.lock_url.clone(), self.io);
        let got = on(&mut self.lock_conn, &url, io, |c| {
            redis::cmd("GET").arg(key).query::<Option<u64>>(c)
        });
        let Some(Ok(from)) = got else { return false };
        let op = format!("c {} {to}", line::value(from));
        rec.put(&line::invoke(h, self.p, self.n, call, &op));
        true
    }

    /// One section: lock, the reads, a hold, the writes, unlock.
    fn round(&mut self, lock: &dyn Lock, rec: &Recorder, res: &mut Resource) {
        let Some(t) = take(lock, rec, res, LOCK, Duration::from_secs(3)) else {
            return;
        };
        self.n += 1;
        let value = (u64::from(self.id) << 32) | self.n;
        let registers = self.registers;
        let g = registers && self.read_for_cas(rec, History::Guarded, GUARDED_KEY, value);
        let c = registers && self.read_for_cas(rec, History::Control, CONTROL_KEY, value);
        let size = self.fenced_size(rec, t.token, value);
        let hold = Duration::from_millis(10 + self.rng.below(20));
        if t.held.wait_lost(hold) {
            rec.put(&history::line::lost(&t.key, t.token, now_ns()));
        }
        if g {
            let mut set = redis::pipe();
            set.set(GUARDED_KEY, value);
            let r = match t.held.guard() {
                Some(guard) => library_outcome(&guard.run_if_held(&set)),
                None => Outcome::Fail,
            };
            rec.put(&line::complete(
                History::Guarded,
                self.p,
                self.n,
                now_ns(),
                r,
            ));
        }
        if c {
            // The control writes whatever the guard says.
            let (url, io) = (self.lock_url.clone(), self.io);
            let r = on(&mut self.lock_conn, &url, io, |c| {
                redis::cmd("SET").arg(CONTROL_KEY).arg(value).query::<()>(c)
            });
            let o = outcome_of(r.as_ref());
            rec.put(&line::complete(
                History::Control,
                self.p,
                self.n,
                now_ns(),
                o,
            ));
        }
        if let Some(size) = size {
            let mut add = redis::pipe();
            add.hset(SET_KEY, size, value).set(SIZE_KEY, size + 1);
            let r = self.fenced(t.token, &add);
            let o = match &r {
                Some(r) => library_outcome(r),
                None => Outcome::Fail,
            };
            // A pipeline of two commands may have run its first when the
            // second replied with an error: unknown, not refused.
            let o = match (o, &r) {
                (Outcome::Fail, Some(Err(Error::Redis(_)))) => Outcome::Info,
                _ => o,
            };
            rec.put(&line::complete(History::Set, self.p, self.n, now_ns(), o));
        }
        leave(t, rec, res);
    }

    /// `admit_and_run` on the set's server; `None` when no connection could
    /// be had.
    fn fenced(
        &mut self,
        token: u64,
        commands: &redis::Pipeline,
    ) -> Option<Result<Vec<Value>, Error>> {
        if self.set_conn.is_none() {
            self.set_conn = connect(&self.resource_url, Duration::from_secs(1));
        }
        let conn = self.set_conn.as_mut()?;
        let r = fence::admit_and_run(conn, FENCE_KEY, token, commands);
        if matches!(r, Err(Error::Redis(_))) {
            self.set_conn = None;
        }
        Some(r)
    }

    /// The set's size, read through the fence (which admits `token`); the
    /// add of `element` recorded as invoked once it returned.
    fn fenced_size(&mut self, rec: &Recorder, token: u64, element: u64) -> Option<u64> {
        let call = now_ns();
        let mut get = redis::pipe();
        get.get(SIZE_KEY);
        let replies = self.fenced(token, &get)?.ok()?;
        let size = match replies.first() {
            Some(v) => redis::from_redis_value_ref::<Option<u64>>(v).ok()?,
            None => return None,
        };
        let size = size.unwrap_or(0);
        rec.put(&line::invoke(
            History::Set,
            self.p,
            self.n,
            call,
            &format!("a {element}"),
        ));
        Some(size)
    }
}

/// Plain `GET`s of both registers at random moments, until `stop`.
fn reads(s: &Settings, rec: &Recorder, stop: &AtomicBool) {
    let p = process(s.id, READER);
    let url = s.lock_urls.first().cloned().unwrap_or_default();
    let mut conn = None;
    let mut rng = Rng::new(u64::from(s.id) << 8 | 0x12);
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(5 + rng.below(20)));
        for (h, key) in [
            (History::Guarded, GUARDED_KEY),
            (History::Control, CONTROL_KEY),
        ] {
            n += 1;
            rec.put(&line::invoke(h, p, n, now_ns(), "r"));
            let got = on(&mut conn, &url, s.io, |c| {
                redis::cmd("GET").arg(key).query::<Option<u64>>(c)
            });
            let t = now_ns();
            match got {
                Some(Ok(v)) => rec.put(&line::read(h, p, n, t, v)),
                r => rec.put(&line::complete(h, p, n, t, outcome_of(r.as_ref()))),
            }
        }
    }
}
