//! The checker's rules over a run's merged history (`check`): this file
//! holds what they share and the exclusion and fencing rules; `rules.rs`
//! the others.

use std::collections::{BTreeMap, HashMap};

use super::{lock_of, ms, now_ns, rule, Event, Kind, Limits, Op, Section, Verdict, WorkerLog};

/// What every rule reads: the run's records by lock, its faults, its bounds.
pub(super) struct Ctx<'a> {
    pub(super) logs: &'a [WorkerLog],
    pub(super) events: &'a [Event],
    pub(super) limits: &'a Limits,
    pub(super) redlock: bool,
    pub(super) lossy_failover: bool,
    /// When each killed worker was killed.
    pub(super) killed: HashMap<u32, u64>,
    /// Each lock's sections, in the order of their entries.
    pub(super) by_key: BTreeMap<&'a str, Vec<&'a Section>>,
}

/// Checks the merged history: no overlap but of a holder that was cut off,
/// paused or robbed and was told and fenced off; fencing tokens unique and
/// rising; every robbed holder told in time; takeover in time after a kill;
/// a waiting caller served promptly after a release; a clean end with no
/// watchdog left running. (Lost updates and leftovers are checked by the
/// coordinator, which reads Redis.)
/// `lossy_failover`: Sentinel without `min_replicas`, where a failover may
/// hand a lock to a second holder (the documented limit of asynchronous
/// replication): such overlaps are counted apart, as long as no stale write
/// is accepted. The older holder may not be told in time: until the old
/// master is demoted, it goes on confirming its renewals.
pub fn check(
    logs: &[WorkerLog],
    events: &[Event],
    limits: &Limits,
    redlock: bool,
    lossy_failover: bool,
) -> Verdict {
    let mut v = Verdict::default();
    let killed: HashMap<u32, u64> = events
        .iter()
        .filter(|e| matches!(e.kind, Kind::KillHolder | Kind::KillWaiter))
        .filter_map(|e| e.worker.map(|w| (w, e.start)))
        .collect();
    let mut by_key: BTreeMap<&str, Vec<&Section>> = BTreeMap::new();
    let mut rounds = Vec::new();
    for log in logs {
        for s in &log.sections {
            by_key.entry(lock_of(&s.key)).or_default().push(s);
            // A round holds several keys: counted once.
            if s.starved.is_some() && !rounds.contains(&(s.worker, s.starved)) {
                rounds.push((s.worker, s.starved));
                v.starved_landed += 1;
            }
        }
        v.acquisitions += log.sections.len() as u64;
        match log.end {
            Some(0) => {}
            Some(n) => v.violate(
                rule::CLEAN_END,
                format!(
                    "worker {}: {n} watchdog threads still running at its end",
                    log.id
                ),
            ),
            None if killed.contains_key(&log.id) => {}
            None => v.violate(
                rule::CLEAN_END,
                format!("worker {} never reached its clean end", log.id),
            ),
        }
    }
    for sections in by_key.values_mut() {
        sections.sort_by_key(|s| s.enter);
    }
    let c = Ctx {
        logs,
        events,
        limits,
        redlock,
        lossy_failover,
        killed,
        by_key,
    };
    c.exclusion(&mut v);
    v.told = c
        .by_key
        .values()
        .flatten()
        .filter(|s| s.told().is_some())
        .count() as u64;

    // How long after each fault ended every key was held again.
    for e in c.events.iter().filter(|e| e.kind != Kind::KillHolder) {
        let back = c
            .by_key
            .values()
            .filter_map(|ss| ss.iter().find(|s| s.enter > e.end).map(|s| s.enter - e.end))
            .max();
        let r = v.recovery.entry(e.kind).or_default();
        *r = (*r).max(back.unwrap_or(0));
    }

    c.loss_reports(&mut v);
    c.leases(&mut v);
    c.takeovers(&mut v);
    c.handovers(&mut v);
    v
}

impl Ctx<'_> {
    /// When `s` ended: its exit, else its worker's kill.
    pub(super) fn end_of(&self, s: &Section) -> u64 {
        s.exit
            .as_ref()
            .map(|x| x.t)
            .or_else(|| self.killed.get(&s.worker).copied())
            .unwrap_or(u64::MAX)
    }

    /// The fault that cut `s`'s worker off (or froze it) while it held the
    /// lock (a pause that ended less than a TTL before its recorded entry
    /// may have hit it between `lock` returning and the record).
    fn hit(&self, s: &Section, until: u64, how: fn(Kind) -> bool) -> Option<Kind> {
        self.events
            .iter()
            .find(|e| {
                how(e.kind)
                    && e.worker == Some(s.worker)
                    && e.start < until.max(s.enter)
                    && e.end + self.limits.ttl > s.enter
            })
            .map(|e| e.kind)
    }

    pub(super) fn cut_off(&self, s: &Section, until: u64) -> Option<Kind> {
        self.hit(s, until, Kind::cuts_off_worker)
    }

    fn frozen(&self, s: &Section, until: u64) -> Option<Kind> {
        self.hit(s, until, Kind::freezes_worker)
    }

    /// Whether `s` held one of the locks `e` took away.
    fn victim(&self, e: &Event, s: &Section) -> bool {
        e.victims.iter().any(|(k, t, w)| {
            *k == s.key
                && (*t == s.token
                    || (*w == Some(s.worker) && s.asked <= e.start && self.end_of(s) >= e.start))
        }) || e
            .evicted
            .iter()
            .any(|(k, t)| Event::evicted_from(s, k, *t, self.end_of(s)))
    }

    /// Whether `e` takes `s`'s lock away. On Redlock only a fault that hit
    /// a majority of masters does. Two masters flushed apart, for a holder
    /// that held before the first: a renewal in between repairs the first
    /// loss, so the two take nothing away together, unless they came within
    /// two renewal intervals (a rival that holds the flushed master for a
    /// moment when the renewal comes delays the repair to the next one).
    fn takes_away(&self, e: &Event, s: &Section) -> bool {
        e.kind.is_tamper()
            && (!self.redlock || e.masters.len() >= 2)
            && (e.kind != Kind::FlushTwo
                || s.enter > e.start
                || e.end - e.start <= self.limits.renew * 2 + self.limits.op)
    }

    /// The tamper that took `s`'s lock away before `until`.
    pub(super) fn robbed(&self, s: &Section, until: u64) -> Option<Kind> {
        self.events
            .iter()
            .find(|e| self.takes_away(e, s) && e.start <= until && self.victim(e, s))
            .map(|e| e.kind)
    }

    /// A failover around `since` that may have lost a lock granted on the
    /// old master (a master that keeps taking writes until it is demoted).
    pub(super) fn failed_over(&self, since: u64) -> Option<Kind> {
        self.events
            .iter()
            .find(|e| {
                self.lossy_failover
                    && matches!(e.kind, Kind::Failover | Kind::ClusterKill)
                    && e.start <= since
                    && since <= e.end + self.limits.ttl
            })
            .map(|e| e.kind)
    }

    /// As `robbed`, for a section that ended before a renewal could tell it.
    pub(super) fn robbed_untold(&self, s: &Section, until: u64) -> Option<Kind> {
        self.events
            .iter()
            .find(|e| {
                self.takes_away(e, s)
                    && e.start <= until
                    && self.victim(e, s)
                    && s.exit
                        .as_ref()
                        .is_some_and(|x| x.t <= e.end + self.limits.loss_report())
            })
            .map(|e| e.kind)
    }

    /// Whether a read hold other than `s` is still in Redis at `t`: until
    /// its exit, or a TTL past its worker's kill.
    /// Sections are sorted by entry, and no read hold lasts ten TTLs (a
    /// frozen worker's lasts two): only those that entered in the ten TTLs
    /// before `t` are looked at, so the rule stays linear in the history.
    pub(super) fn read_held_at(&self, sections: &[&Section], s: &Section, t: u64) -> bool {
        let entered = sections.partition_point(|n| n.enter < t);
        let since = t.saturating_sub(10 * self.limits.ttl);
        let before: &[&Section] = sections.get(..entered).unwrap_or_default();
        before
            .iter()
            .rev()
            .take_while(|n| n.enter >= since)
            .any(|n| {
                let until = n
                    .exit
                    .as_ref()
                    .map(|x| x.t)
                    .or_else(|| self.killed.get(&n.worker).map(|k| k + self.limits.ttl));
                n.is_read() && !std::ptr::eq(*n, s) && n.enter < t && until.is_none_or(|u| u > t)
            })
    }

    /// Exclusion (no overlap but of a holder cut off, paused or robbed, told
    /// and fenced off), stale writes, and fencing tokens unique and rising.
    fn exclusion(&self, v: &mut Verdict) {
        for sections in self.by_key.values() {
            let mut seen = HashMap::new();
            for s in sections {
                if let Some(w) = seen.insert(s.token, s.worker) {
                    v.violate_at(
                        rule::FENCING,
                        format!(
                            "{}: fencing token {} handed out twice (workers {w} and {})",
                            s.key, s.token, s.worker
                        ),
                        s.enter,
                        &s.key,
                        &[s],
                    );
                }
            }
            for (i, a) in sections.iter().enumerate() {
                let end = self.end_of(a);
                if end == u64::MAX {
                    v.violate_at(
                        rule::EXCLUSION,
                        format!(
                            "{} token {}: worker {} entered and never left",
                            a.key, a.token, a.worker
                        ),
                        a.enter,
                        &a.key,
                        &[a],
                    );
                }
                let mut overlapped = false;
                for b in sections.iter().skip(i + 1).take_while(|b| b.enter < end) {
                    if a.is_read() && b.is_read() {
                        continue; // readers share
                    }
                    overlapped = true;
                    // The holder with the older token is the one that should
                    // have stopped.
                    let (old, new) = if a.token < b.token { (a, b) } else { (b, a) };
                    let since = a.enter.max(b.enter);
                    // A stale write is one the fence should have refused: begun
                    // after the newer holder's fenced read had been accepted, so
                    // the resource knew the newer token. One that reaches the
                    // resource before the newer holder first touches it is
                    // ordered before that holder, which then reads what it
                    // wrote (the lost-update check sees to that).
                    let wrote = new.read_at.is_some_and(|read| {
                        old.exit
                            .as_ref()
                            .is_some_and(|x| x.set == Op::Ok && x.set_start > read)
                    });
                    let told = old.told();
                    let why = if told.is_some_and(|t| t <= since) {
                        Some(None)
                    } else if told.is_some() {
                        // Told after the rival entered: only a frozen process
                        // or a lock taken behind the library's back explains it.
                        self.frozen(old, since)
                            .or_else(|| self.robbed(old, since))
                            .or_else(|| self.failed_over(since))
                            .map(Some)
                    } else {
                        // Robbed, and its section ended before a renewal could
                        // have told it; or its renewals went to a demoted
                        // master that still took them (Sentinel's documented
                        // limit without min_replicas).
                        self.robbed_untold(old, since)
                            .or_else(|| self.failed_over(since))
                            .map(Some)
                    };
                    match (why, wrote) {
                        (Some(_), true) => {
                            v.stale_accepted += 1;
                            v.violate_at(
                                rule::STALE_WRITE,
                                format!(
                                    "{}: a stale write of token {} (worker {}) was accepted after token {} had read",
                                    a.key, old.token, old.worker, new.token
                                ),
                                since,
                                &a.key,
                                &[old, new],
                            );
                        }
                        (Some(None), false) => v.known_before += 1,
                        (Some(Some(kind)), false) => {
                            *v.excused.entry(kind.name().to_owned()).or_default() += 1;
                            v.notes.push(format!(
                                "{}: w{} token {} (enter {}, told {:?}, exit {:?}) / w{} token {} (enter {}): {}",
                                a.key,
                                old.worker,
                                old.token,
                                old.enter,
                                old.told(),
                                old.exit.as_ref().map(|x| x.t),
                                new.worker,
                                new.token,
                                new.enter,
                                kind.name()
                            ));
                        }
                        (None, _) => v.violate_at(
                            rule::EXCLUSION,
                            format!(
                                "{}: worker {} (token {}) and worker {} (token {}) held the lock together \
                                 for {:.1} ms, and the first was not told it had lost it (told {})",
                                a.key,
                                old.worker,
                                old.token,
                                new.worker,
                                new.token,
                                ms(end.min(self.end_of(b)).min(now_ns()).saturating_sub(b.enter)),
                                told.map_or("never".to_owned(), |t| format!(
                                    "{:.1} ms after", ms(t.saturating_sub(since))
                                )),
                            ),
                            since,
                            &a.key,
                            &[old, new],
                        ),
                    }
                }
                // Tokens rise in the order the lock was held, but for a stale
                // holder that recorded its entry late (it was frozen or cut off
                // in between, and told).
                // Read holds granted together may record their entries in
                // another order.
                let next = sections
                    .get(i + 1)
                    .filter(|b| !(a.is_read() && b.is_read()));
                if let Some(b) = next {
                    if !overlapped && b.token <= a.token {
                        let fenced_off = !b.exit.as_ref().is_some_and(|x| x.set == Op::Ok);
                        let late = fenced_off
                            && ((b.told().is_some()
                                && (self.cut_off(b, b.enter).is_some()
                                    || self.robbed(b, b.enter).is_some()
                                    || self.failed_over(b.enter).is_some()))
                                || self.robbed_untold(b, b.enter).is_some());
                        if late {
                            *v.excused
                                .entry("recorded its entry late, and was fenced off".to_owned())
                                .or_default() += 1;
                        } else {
                            v.violate_at(
                                rule::FENCING,
                                format!(
                                    "{}: fencing token went from {} to {} between holders",
                                    a.key, a.token, b.token
                                ),
                                b.enter,
                                &a.key,
                                &[a, b],
                            );
                        }
                    }
                }
            }
        }
    }
}
