//! What a report prints to explain a violation: the faults and records
//! around it, every time against its moment.

use std::fmt::Write as _;

use super::{lock_of, Event, Limits, Section, Violation, WorkerLog, MS};

/// `t` against `at`, in signed milliseconds.
fn rel(t: u64, at: u64) -> String {
    let d = i128::from(t) - i128::from(at);
    format!("{:+.1} ms", d as f64 / MS as f64)
}

impl Event {
    /// One line for people, its times against `at`.
    pub fn describe(&self, at: u64) -> String {
        let mut s = format!(
            "{} from {} to {}",
            self.kind.name(),
            rel(self.start, at),
            rel(self.end, at)
        );
        if let Some(w) = self.worker {
            let _ = write!(s, ", worker {w}");
        }
        if !self.masters.is_empty() {
            let _ = write!(s, ", masters {:?}", self.masters);
        }
        if !self.victims.is_empty() {
            let shown: Vec<String> = self
                .victims
                .iter()
                .take(12)
                .map(|(k, t, w)| format!("{k} {t} (w{})", w.map_or("?".into(), |w| w.to_string())))
                .collect();
            let more = self.victims.len().saturating_sub(shown.len());
            let _ = write!(s, ", took {}", shown.join(", "));
            if more > 0 {
                let _ = write!(s, " and {more} more");
            }
        }
        if !self.evicted.is_empty() {
            let shown: Vec<String> = self
                .evicted
                .iter()
                .take(12)
                .map(|(k, t)| format!("{k} at {}", rel(*t, at)))
                .collect();
            let more = self.evicted.len().saturating_sub(shown.len());
            let _ = write!(s, ", evicted (heard) {}", shown.join(", "));
            if more > 0 {
                let _ = write!(s, " and {more} more");
            }
        }
        s
    }

    /// The whole event, with absolute times, for a kept history.
    pub fn record(&self) -> String {
        format!(
            "{:?} {} {} worker {:?} loses {} masters {:?} victims {:?} evicted {:?}",
            self.kind,
            self.start,
            self.end,
            self.worker,
            self.loses,
            self.masters,
            self.victims,
            self.evicted
        )
    }
}

impl Section {
    /// Its records, times against `at`.
    fn describe(&self, at: u64) -> String {
        let mut s = format!(
            "w{} {} token {}: asked {}, entered {}",
            self.worker,
            self.key,
            self.token,
            rel(self.asked, at),
            rel(self.enter, at)
        );
        if let Some(t) = self.read_at {
            let _ = write!(s, ", fenced read {}", rel(t, at));
        }
        if let (Some(b), Some(e)) = (self.starving, self.starved) {
            let _ = write!(s, ", starving {} to {}", rel(b, at), rel(e, at));
        }
        if let Some(t) = self.lost_at {
            let _ = write!(s, ", told lost {}", rel(t, at));
        }
        match &self.exit {
            Some(x) => {
                let _ = write!(
                    s,
                    ", exit {} (write {}, is_lost {})",
                    rel(x.t, at),
                    x.set.code(),
                    x.lost
                );
            }
            None => s += ", no exit",
        }
        if let Some((t, u)) = self.unlock {
            let _ = write!(s, ", unlock {} {}", rel(t, at), u.code());
        }
        s
    }
}

/// What a report needs to explain `v` on its own: the faults injected
/// within three TTLs of it, the records of the sections it names, and those
/// of the other sections of its lock nearest to it, with every time against
/// the violation's moment. Empty for a violation with no moment.
pub fn explain(v: &Violation, logs: &[WorkerLog], events: &[Event], limits: &Limits) -> String {
    let Some(at) = v.at else {
        return String::new();
    };
    let window = 3 * limits.ttl;
    let mut s = String::new();
    let near: Vec<&Event> = events
        .iter()
        .filter(|e| e.start <= at + window && e.end + window >= at)
        .collect();
    if near.is_empty() {
        s += "      no fault injected within 3 TTLs\n";
    }
    for e in near {
        let _ = writeln!(s, "      fault: {}", e.describe(at));
    }
    let Some(lock) = &v.lock else {
        return s;
    };
    let sections: Vec<&Section> = logs
        .iter()
        .flat_map(|l| &l.sections)
        .filter(|x| lock_of(&x.key) == lock)
        .collect();
    let named = |x: &Section| v.involved.contains(&(x.worker, x.token));
    for x in sections.iter().filter(|x| named(x)) {
        let _ = writeln!(s, "      * {}", x.describe(at));
    }
    let mut others: Vec<&Section> = sections
        .iter()
        .filter(|x| !named(x) && x.enter.abs_diff(at) <= window)
        .copied()
        .collect();
    others.sort_by_key(|x| x.enter.abs_diff(at));
    others.truncate(8);
    others.sort_by_key(|x| x.enter);
    for x in others {
        let _ = writeln!(s, "        {}", x.describe(at));
    }
    let mut failed: Vec<(u32, &(String, u64, u64))> = logs
        .iter()
        .flat_map(|l| l.failed_calls.iter().map(move |c| (l.id, c)))
        .filter(|(_, (k, _, ended))| lock_of(k) == lock && ended.abs_diff(at) <= window)
        .collect();
    failed.sort_by_key(|(_, (_, _, ended))| ended.abs_diff(at));
    failed.truncate(5);
    for (w, (k, asked, ended)) in failed {
        let _ = writeln!(
            s,
            "        w{w} {k}: a lock call asked {} failed {}",
            rel(*asked, at),
            rel(*ended, at)
        );
    }
    s
}
