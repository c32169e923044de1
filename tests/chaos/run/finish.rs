//! The end of a run: the workers stopped, the keyspace and the fenced
//! counters read, and the history checked.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::Run;
use crate::history::{self, check, rule, WorkerLog};
use crate::linear::{Checks, Workloads, SET_KEY};
use crate::support::{add_counts, history_dir, limits, lock_name, nanos, section_keys};
use crate::worker::{resource_keys, PREFIX};
use crate::{Forks, Outcome, SlowWaiters, IO, QUEUED_PAUSE, REDLOCK_IO, TTL};

impl Run<'_> {
    pub(super) fn finish(mut self) -> Outcome {
        self.watch_clock();
        let processes = self.next_id as usize;
        // Closing a worker's standard input tells it to stop.
        for w in &mut self.workers {
            w.stdin = None;
        }
        let give_up = Instant::now() + Duration::from_secs(30);
        for w in &mut self.workers {
            loop {
                match w.child.try_wait() {
                    Ok(Some(status)) => {
                        if !status.success() {
                            self.violations.push(history::Violation::new(
                                rule::CLEAN_END,
                                format!("worker {} exited with {status}", w.id),
                            ));
                        }
                        break;
                    }
                    _ if Instant::now() > give_up => {
                        self.violations.push(history::Violation::new(
                            rule::CLEAN_END,
                            format!("worker {} did not stop", w.id),
                        ));
                        let _ = w.child.kill();
                        let _ = w.child.wait();
                        break;
                    }
                    _ => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        }
        if self.scenario.flaw.is_none() {
            for i in 0..self.servers.len() {
                self.leftovers(i);
            }
        }
        // The fenced counter lost no update.
        let mut rejected = 0;
        let mut res = self.resource.conn();
        for key in section_keys() {
            let [_, count, stats] = resource_keys(&key);
            let counter: u64 = redis::cmd("GET")
                .arg(&count)
                .query::<Option<u64>>(&mut res)
                .unwrap()
                .unwrap_or(0);
            let (accepted, rej): (Option<u64>, Option<u64>) = redis::cmd("HMGET")
                .arg(&stats)
                .arg("accepted")
                .arg("rejected")
                .query(&mut res)
                .unwrap();
            rejected += rej.unwrap_or(0);
            if counter != accepted.unwrap_or(0) {
                self.violations.push(history::Violation::new(
                    rule::LOST_UPDATE,
                    format!(
                        "{key}: counter {counter} after {} accepted increments: updates were lost",
                        accepted.unwrap_or(0)
                    ),
                ));
            }
        }
        if let Ok(keep) = std::env::var("REDMUTEX_CHAOS_KEEP") {
            self.keep_logs(&PathBuf::from(keep));
        }
        let texts: Vec<String> = (0..self.next_id)
            .map(|id| std::fs::read_to_string(self.log_path(id)).unwrap_or_default())
            .collect();
        let logs: Vec<WorkerLog> = (0..self.next_id)
            .zip(&texts)
            .map(|(id, text)| WorkerLog::parse(id, text))
            .collect();
        let op = if self.scenario.redlock {
            REDLOCK_IO
        } else {
            IO
        };
        let mut limits = limits(op);
        limits.kept_leases = self.scenario.forked_workers != Forks::No;
        if self.scenario.slow_waiters != SlowWaiters::No {
            // A queued waiter calls at least this often, whatever its
            // backoff; its stay (a dead one's) is bounded by that pause and
            // one call.
            limits.backoff = nanos(QUEUED_PAUSE);
        }
        // The starving rounds as the workers recorded them, not as asked.
        let asked = self.events.len();
        history::land_starving(&mut self.events, &logs);
        let not_landed = asked - self.events.len();
        let mut verdict = check(
            &logs,
            &self.events,
            &limits,
            self.scenario.redlock,
            self.scenario.sentinel == Some(0),
        );
        verdict.violations.append(&mut self.violations);
        // The workloads' histories, by the linearizability checker.
        let workloads = Workloads::of(self.scenario);
        let linear = Checks::run(workloads, &texts, &self.events, &self.final_set(workloads));
        verdict.violations.extend(linear.violations());
        let explained: Vec<String> = verdict
            .violations
            .iter()
            .map(|v| history::explain(v, &logs, &self.events, &limits) + &linear.explain(v))
            .collect();
        // A real locker's violations: its history is kept, with the faults
        // injected, so that the report and these files explain it.
        let kept = (self.scenario.flaw.is_none() && !verdict.violations.is_empty()).then(|| {
            let to = self.keep_logs(&history_dir());
            let events: String = self.events.iter().map(|e| e.record() + "\n").collect();
            let _ = std::fs::write(to.join("events.txt"), events);
            let mut text = String::new();
            for (v, why) in verdict.violations.iter().zip(&explained) {
                text += &format!("{v}\n{why}\n");
            }
            let _ = std::fs::write(to.join("violations.txt"), text);
            to
        });
        let mut failures = BTreeMap::new();
        for l in &logs {
            add_counts(&mut failures, &l.failures);
        }
        let clock_step = u64::try_from(self.wall.1 - self.wall.0).unwrap_or(u64::MAX);
        Outcome {
            verdict,
            events: self.events,
            processes,
            rejected,
            failures,
            clock_step,
            not_landed,
            explained,
            kept,
            linear,
        }
    }

    /// The workloads' set as read at the end (every slot's element).
    fn final_set(&self, w: Workloads) -> Vec<u64> {
        if w == Workloads::None {
            return Vec::new();
        }
        let elements: Vec<String> = redis::cmd("HVALS")
            .arg(SET_KEY)
            .query(&mut self.resource.conn())
            .expect("read the set");
        // Something not a number is nothing anyone added.
        elements
            .iter()
            .map(|e| e.parse().unwrap_or(u64::MAX))
            .collect()
    }

    /// Copies every worker's record file to `<dir>/<scenario>/`; that
    /// directory.
    pub(super) fn keep_logs(&self, dir: &std::path::Path) -> PathBuf {
        let to = dir.join(self.scenario.name.replace([' ', '/', ':'], "_"));
        std::fs::create_dir_all(&to).unwrap();
        for id in 0..self.next_id {
            let _ = std::fs::copy(self.log_path(id), to.join(format!("worker-{id}.log")));
        }
        to
    }

    /// Reads server `i`'s keyspace once, right after every worker stopped:
    /// a lock, a queue entry or a waiter left behind must belong to a worker
    /// that was killed (and expire on its own); anything else is a leftover.
    pub(super) fn leftovers(&mut self, i: usize) {
        let dead = |meta: &str| {
            meta.strip_prefix('w')
                .and_then(|n| n.parse::<u32>().ok())
                .is_some_and(|id| self.killed.contains(&id))
        };
        let mut c = self.conn(i);
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{PREFIX}:*"))
            .query(&mut c)
            .unwrap();
        let reserved = format!("{PREFIX}:__redmutex__:");
        let mut left = Vec::new();
        for k in keys {
            if let Some(rest) = k.strip_prefix(&reserved) {
                // The audit trail is kept, capped.
                if rest == "fence" || rest == "audit" {
                    continue;
                }
                // The marks of broken holds go by themselves, within the
                // broken key's TTL and 5 s.
                if rest == "marks" {
                    let pttl: i64 = redis::cmd("PTTL").arg(&k).query(&mut c).unwrap_or(-1);
                    if pttl < 0 || pttl > (TTL + Duration::from_secs(5)).as_millis() as i64 {
                        left.push(format!("{k} (PTTL {pttl} ms)"));
                    }
                    continue;
                }
                // The set of a read-write lock's read holds: each one
                // left must be gone already or held by a killed worker.
                if rest.starts_with("rw-readers:") {
                    let members: Vec<String> = redis::cmd("SMEMBERS")
                        .arg(&k)
                        .query(&mut c)
                        .unwrap_or_default();
                    for m in members {
                        let v: Option<String> =
                            redis::cmd("GET").arg(&m).query(&mut c).unwrap_or(None);
                        let meta = v.as_deref().and_then(|v| v.rsplit(':').next());
                        if meta.is_some_and(|meta| !dead(meta)) {
                            left.push(format!("{k} (counts {m}, held by {meta:?})"));
                        }
                    }
                    continue;
                }
                // A semaphore's queue and a read-write lock's are kept as a
                // lock's; the latter's entries lead their metadata with the
                // waiter's kind (r or w).
                let rw = rest.starts_with("rw-");
                let rest = rest.strip_prefix("permit-").unwrap_or(rest);
                let rest = rest.strip_prefix("rw-").unwrap_or(rest);
                let meta_of = |entry: &str| -> String {
                    let meta = entry.splitn(4, ':').nth(3).unwrap_or_default();
                    let meta = if rw {
                        meta.get(1..).unwrap_or_default()
                    } else {
                        meta
                    };
                    meta.to_owned()
                };
                if rest.starts_with("waiters:") {
                    let entries: Vec<(String, String)> = redis::cmd("HGETALL")
                        .arg(&k)
                        .query(&mut c)
                        .unwrap_or_default();
                    for (_, entry) in entries {
                        let meta = meta_of(&entry);
                        if !dead(&meta) {
                            left.push(format!("{k} (a waiter of {meta})"));
                        }
                    }
                    continue;
                }
                if rest.starts_with("queue:") {
                    let members: Vec<String> = redis::cmd("ZRANGE")
                        .arg(&k)
                        .arg(0)
                        .arg(-1)
                        .query(&mut c)
                        .unwrap_or_default();
                    let waiters = k.replacen("queue:", "waiters:", 1);
                    for m in members {
                        let entry: Option<String> = redis::cmd("HGET")
                            .arg(&waiters)
                            .arg(&m)
                            .query(&mut c)
                            .unwrap_or(None);
                        let meta = entry.as_deref().map(meta_of).unwrap_or_default();
                        if !dead(&meta) {
                            left.push(format!("{k} (a queued waiter without a live entry)"));
                        }
                    }
                    continue;
                }
                if lock_name(&k).is_none() {
                    left.push(k);
                    continue;
                }
            }
            if lock_name(&k).is_some() {
                let v: Option<String> = redis::cmd("GET").arg(&k).query(&mut c).unwrap_or(None);
                let meta = v
                    .as_deref()
                    .and_then(|v| v.rsplit(':').next())
                    .unwrap_or_default();
                if !dead(meta) {
                    left.push(format!("{k} (held by {meta})"));
                }
            }
        }
        if !left.is_empty() {
            self.violations.push(history::Violation::new(
                rule::LEFTOVERS,
                format!("left on server {i} after the run: {left:?}"),
            ));
        }
    }
}
