//! The checker's other rules: loss reports, leases kept through starving
//! rounds and forks, takeover after a kill, hand-over after a release.

use super::check::Ctx;
use super::{asked_for, lock_calls, lock_of, ms, rule, Event, Kind, Section, Unlock, Verdict, MS};

impl Ctx<'_> {
    // An eviction heard just before `s` recorded its entry took the key of
    // an older holder still in at it, not `s`'s, when `s`'s key is evicted
    // later with nobody else entering the lock in between: `s` set its key
    // (`SET NX`) once the older one was gone, and the key evicted later was
    // its own. Its loss is timed from that later eviction.
    fn took_the_older_key(&self, s: &Section, key: &str, t: u64) -> bool {
        let Some(sections) = self.by_key.get(lock_of(key)).filter(|_| s.enter > t) else {
            return false;
        };
        let older_in = sections.iter().any(|o| {
            !std::ptr::eq(*o, s) && o.enter <= t && Event::evicted_from(o, key, t, self.end_of(o))
        });
        let later = self
            .events
            .iter()
            .flat_map(|o| &o.evicted)
            .filter(|(k, t2)| {
                k == key && *t2 > t && Event::evicted_from(s, key, *t2, self.end_of(s))
            })
            .map(|(_, t2)| *t2)
            .min();
        older_in
            && later.is_some_and(|t2| {
                !sections
                    .iter()
                    .any(|n| !std::ptr::eq(*n, s) && n.enter > t && n.enter < t2)
            })
    }

    /// Every holder whose lock was taken away is told by its watchdog, at
    /// its next renewal; by its lease's deadline when a fault kept its
    /// renewals from getting through.
    pub(super) fn loss_reports(&self, v: &mut Verdict) {
        // Every holder whose lock was taken away is told by its watchdog, at
        // its next renewal; by its lease's deadline when a fault kept its
        // renewals from getting through.
        for e in self.events.iter().filter(|e| e.kind.is_tamper() && e.loses) {
            // A restart takes the locks away when the server comes back.
            let from = if matches!(
                e.kind,
                Kind::RestoreSnapshot
                    | Kind::RestartAof
                    | Kind::RestartEmpty
                    | Kind::KillTwo
                    | Kind::KillAll
            ) {
                e.end
            } else {
                e.start
            };
            let by_token = e.victims.iter().filter_map(|(key, token, _)| {
                // None: taken from a holder that had not recorded yet.
                let s = self
                    .by_key
                    .get(lock_of(key))?
                    .iter()
                    .find(|s| s.token == *token)?;
                Some((*s, from))
            });
            let by_eviction = e.evicted.iter().flat_map(|(key, t)| {
                self.by_key
                    .get(lock_of(key))
                    .into_iter()
                    .flatten()
                    .filter(|s| Event::evicted_from(s, key, *t, self.end_of(s)))
                    .filter(|s| !self.took_the_older_key(s, key, *t))
                    .map(|s| (*s, *t))
            });
            let mut victims: Vec<(&Section, u64)> = by_token.chain(by_eviction).collect();
            // A holder whose key was heard evicted twice is one victim, from
            // the first.
            victims.sort_by_key(|(s, from)| (s.worker, s.token, *from));
            victims.dedup_by_key(|(s, _)| (s.worker, s.token));
            for (s, from) in victims {
                let (key, token) = (&s.key, s.token);
                if self.killed.get(&s.worker).is_some_and(|&k| k > s.enter) && s.told().is_none() {
                    continue; // self.killed before it was told
                }
                let blocked = self.events.iter().any(|o| {
                    (o.kind.blocks_renewals()
                        || (o.kind.cuts_off_worker() && o.worker == Some(s.worker)))
                        && !std::ptr::eq(o, e)
                        && o.start < from + self.limits.loss_report()
                        && o.end + self.limits.ttl
                            > s.enter.max(from.saturating_sub(self.limits.ttl))
                }) || matches!(e.kind, Kind::KillTwo | Kind::KillAll);
                let bound = if blocked {
                    self.limits.loss_report_blocked()
                } else {
                    self.limits.loss_report()
                };
                // Its section ended before a renewal could tell it.
                let ended_first = s.exit.as_ref().is_some_and(|x| x.t <= from + bound);
                match s.told() {
                    Some(t) => {
                        let late = t.saturating_sub(from);
                        v.losses_reported += 1;
                        if blocked {
                            v.told_by_deadline += 1;
                        }
                        let m = v.loss_report.entry(e.kind).or_default();
                        *m = (*m).max(late);
                        if late > bound {
                            v.violate_at(
                                rule::LOSS_REPORT,
                                format!(
                                    "{key} token {token}: told of the loss ({}) {:.1} ms after it, bound {:.1} ms",
                                    e.kind.name(),
                                    ms(late),
                                    ms(bound)
                                ),
                                from,
                                key,
                                &[s],
                            );
                        }
                    }
                    None if ended_first => {}
                    None => v.violate_at(
                        rule::LOSS_REPORT,
                        format!(
                            "{key} token {token} (worker {}): never told of the loss ({})",
                            s.worker,
                            e.kind.name()
                        ),
                        from,
                        key,
                        &[s],
                    ),
                }
            }
        }
    }

    /// Leases kept through a starving round, and forked workers' leases.
    pub(super) fn leases(&self, v: &mut Verdict) {
        // A lease held while its application holds every pooled connection is
        // kept: the renewals of all its guards share the connection set aside
        // for them. One told lost during a starving round (or within a TTL
        // after it) with no other fault around is a violation.
        for s in self.by_key.values().flatten() {
            let (Some(began), Some(t)) = (s.starving, s.told()) else {
                continue;
            };
            let ended = s.starved.unwrap_or(u64::MAX);
            if t < began || t > ended.saturating_add(self.limits.ttl) {
                continue;
            }
            let other = self.events.iter().any(|e| {
                !(e.kind == Kind::StarvePool && e.worker == Some(s.worker))
                    && e.start <= t
                    && e.end + self.limits.ttl >= s.enter
            });
            if !other {
                v.violate_at(
                    rule::STARVED,
                    format!(
                        "{} token {} (worker {}): lost its lease {:.1} ms into a starving round, with no other fault",
                        s.key,
                        s.token,
                        s.worker,
                        ms(t - began)
                    ),
                    t,
                    &s.key,
                    &[s],
                );
            }
        }

        // Forked workers' watchdogs run: a lease told lost with no fault
        // around (from its grant to a TTL after) is a violation.
        if self.limits.kept_leases {
            for s in self.by_key.values().flatten() {
                let Some(t) = s.told() else { continue };
                let other = self
                    .events
                    .iter()
                    .any(|e| e.start <= t && e.end + self.limits.ttl >= s.enter);
                if !other {
                    v.violate_at(
                        rule::KEPT,
                        format!(
                            "{} token {} (worker {}): lost its lease {:.1} ms after its grant, with no fault around",
                            s.key,
                            s.token,
                            s.worker,
                            ms(t.saturating_sub(s.enter))
                        ),
                        t,
                        &s.key,
                        &[s],
                    );
                }
            }
        }
    }

    /// Takeover after a holder's or a waiter's kill.
    pub(super) fn takeovers(&self, v: &mut Verdict) {
        // After a holder's death, another takes over within TTL + one backoff
        // (more when other faults came in the way, by their length); after a
        // waiter's death, a lock handed to it is claimed for its stay only.
        for e in self
            .events
            .iter()
            .filter(|e| matches!(e.kind, Kind::KillHolder | Kind::KillWaiter))
        {
            let Some(w) = e.worker else { continue };
            let in_the_way: u64 = self
                .events
                .iter()
                .filter(|o| {
                    !std::ptr::eq(*o, e)
                        && o.kind != Kind::ScriptFlush
                        && o.start < e.start + self.limits.takeover()
                        && o.end + self.limits.ttl > e.start
                })
                .map(|o| o.end.saturating_sub(o.start) + self.limits.ttl)
                .sum();
            let bound = self.limits.takeover() + in_the_way;
            let check_next = |key: &str, from: u64, what: &str, v: &mut Verdict| {
                let next = self
                    .by_key
                    .get(key)
                    .and_then(|ss| ss.iter().filter(|n| n.enter > from).map(|n| n.enter).min());
                match next {
                    Some(n) => {
                        let took = n - from;
                        let m = v.takeover.entry(e.kind).or_default();
                        *m = (*m).max(took);
                        if took > bound {
                            v.violate_at(
                                rule::TAKEOVER,
                                format!(
                                    "{key}: held again {:.1} ms after {what}, bound {:.1} ms",
                                    ms(took),
                                    ms(bound)
                                ),
                                from,
                                key,
                                &[],
                            );
                        }
                    }
                    None => v.violate_at(
                        rule::TAKEOVER,
                        format!("{key}: nobody took the lock after {what}"),
                        from,
                        key,
                        &[],
                    ),
                }
            };
            if e.kind == Kind::KillHolder {
                let held: Vec<String> = self
                    .by_key
                    .values()
                    .flatten()
                    .filter(|s| s.worker == w && s.enter < e.start && s.unlock.is_none())
                    .map(|s| lock_of(&s.key).to_owned())
                    .collect();
                for key in held {
                    check_next(&key, e.start, "its holder was self.killed", v);
                }
            } else {
                // The first clean release of each key after the kill: a lock
                // handed to the dead waiter is claimed for its stay only.
                let claim = self.limits.backoff + self.limits.op;
                let bound = claim + self.limits.backoff + self.limits.op + self.limits.slack / 2;
                for (key, sections) in &self.by_key {
                    // An attempt the waiter sent before it died may still reach
                    // the server within one operation bound: after a release
                    // that gave it the lock as a claim, such an attempt takes the
                    // claim up for a whole TTL (the dead waiter then counts as a
                    // holder). So the releases looked at come after that.
                    let after_kill = e.start + self.limits.op;
                    // A read hold's release while another read hold stays
                    // (a self.killed worker's, until its TTL) frees nothing.
                    let mut releases: Vec<(&Section, u64)> = sections
                        .iter()
                        .filter_map(|s| Some((*s, s.exit.as_ref()?.t, s.unlock?)))
                        .filter(|(_, x, (_, u))| *x > after_kill && *u == Unlock::Ok)
                        .map(|(s, x, _)| (s, x))
                        .collect();
                    releases.sort_by_key(|(_, x)| *x);
                    let release = releases
                        .into_iter()
                        .find(|(s, x)| !self.read_held_at(sections, s, *x))
                        .map(|(_, x)| x);
                    let Some(x) = release else { continue };
                    let Some(n) = sections
                        .iter()
                        .filter(|n| n.enter > x)
                        .map(|n| n.enter)
                        .min()
                    else {
                        // Never held again: a violation only on evidence that
                        // someone wanted it, a live worker's lock call on it
                        // that waited past the bound (from the release, or from
                        // its ask when later) and failed, with no other fault
                        // in the way. A run going on with other keys proves
                        // nothing: every live worker may be busy elsewhere.
                        // (A live worker's call in flight at the run's end is
                        // recorded: its threads are joined before its end.)
                        let wanted = self
                            .logs
                            .iter()
                            .filter(|l| l.id != w)
                            .flat_map(|l| l.failed_calls.iter().map(move |c| (l.id, c)))
                            .filter(|(_, (k, _, _))| asked_for(k, key))
                            .filter(|(_, (_, asked, ended))| *ended > (*asked).max(x) + bound)
                            .min_by_key(|(_, (_, _, ended))| *ended);
                        let Some((d, (_, asked, ended))) = wanted else {
                            continue;
                        };
                        let quiet = !self.events.iter().any(|o| {
                            !std::ptr::eq(o, e)
                                && o.kind != Kind::ScriptFlush
                                && o.kind != Kind::KillWaiter
                                && o.start < *ended
                                && o.end + self.limits.ttl > x
                        });
                        if quiet {
                            let rel = |t: u64| (t as f64 - x as f64) / MS as f64;
                            v.violate_at(
                                rule::TAKEOVER,
                                format!(
                                    "{key}: not held again after the first release that followed a waiter's kill (worker {w}), though worker {d} asked for it at {:+.1} ms and failed at {:+.1} ms, bound {:.1} ms",
                                    rel(*asked),
                                    rel(*ended),
                                    ms(bound)
                                ),
                                x,
                                key,
                                &[],
                            );
                        }
                        continue;
                    };
                    // Timed from when someone wanted it: the earliest live
                    // worker's call on the key asked after the release (or in
                    // flight at it), whether it entered or failed. A free lock
                    // nobody asked for is not late.
                    let demand = sections
                        .iter()
                        .filter(|s| s.worker != w && s.enter > x && asked_for(&s.key, key))
                        .map(|s| s.asked.max(x))
                        .chain(
                            self.logs
                                .iter()
                                .filter(|l| l.id != w)
                                .flat_map(|l| l.failed_calls.iter())
                                .filter(|(k, _, ended)| asked_for(k, key) && *ended > x)
                                .map(|(_, asked, _)| (*asked).max(x)),
                        )
                        .min()
                        .unwrap_or(n)
                        .min(n);
                    let took = n - demand;
                    let m = v.takeover.entry(e.kind).or_default();
                    *m = (*m).max(took);
                    let quiet = !self.events.iter().any(|o| {
                        !std::ptr::eq(o, e)
                            && o.kind != Kind::ScriptFlush
                            && o.start < n
                            && o.end + self.limits.ttl > x
                    });
                    if quiet && took > bound {
                        v.violate_at(
                            rule::TAKEOVER,
                            format!(
                                "{key}: held again {:.1} ms after the first release that followed a waiter's kill (worker {w}), and {:.1} ms after a live worker asked for it, bound {:.1} ms",
                                ms(n - x),
                                ms(took),
                                ms(bound)
                            ),
                            x,
                            key,
                            &[],
                        );
                    }
                }
            }
        }
    }

    /// A caller waiting for a lock gets it promptly after a clean release,
    /// outside faults.
    pub(super) fn handovers(&self, v: &mut Verdict) {
        // A caller waiting for a lock gets it promptly after a clean release,
        // outside faults.
        let calls = lock_calls(self.logs);
        let quiet = |from: u64, to: u64| {
            !self.events.iter().any(|e| {
                e.kind != Kind::ScriptFlush
                    && e.start < to
                    && e.end + self.limits.ttl + self.limits.handover() > from
            })
        };
        for (key, sections) in &self.by_key {
            for s in sections {
                // With the server reachable and no fault under way, a release
                // succeeds.
                if let (Some((u, Unlock::Err)), Some(x)) = (s.unlock, s.exit.as_ref()) {
                    if quiet(x.t, u) {
                        v.violate_at(
                            rule::RELEASE_ERROR,
                            format!(
                                "{key}: worker {}'s unlock of token {} failed with no fault under way",
                                s.worker, s.token
                            ),
                            x.t,
                            key,
                            &[s],
                        );
                    }
                }
                let (Some((u, Unlock::Ok)), Some(x)) = (s.unlock, s.exit.as_ref()) else {
                    continue;
                };
                let until = u + self.limits.handover();
                let waiting = calls
                    .iter()
                    .any(|(k, asked, ended)| k == key && *asked < u && *ended > until);
                // A read hold released while other readers hold frees nothing.
                if !waiting || self.read_held_at(sections, s, u) || !quiet(x.t, until) {
                    continue;
                }
                // The next holder may record its entry before the releaser
                // records what `unlock` said.
                if !sections.iter().any(|n| n.enter > x.t && n.enter <= until) {
                    v.violate_at(
                        rule::HANDOVER,
                        format!(
                            "{key}: released by worker {} (token {}) while others waited, and nobody had it {:.1} ms later",
                            s.worker,
                            s.token,
                            ms(self.limits.handover())
                        ),
                        u,
                        key,
                        &[s],
                    );
                }
            }
        }
    }
}
