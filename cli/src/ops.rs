//! `redmutex list`, `break` and `audit`: what an operator sees and does,
//! written for people (a table, a line) or programs (`--json`), each hold
//! and event with its prefix; and where else a name is held.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redmutex::{AuditEntry, LockInfo};

use crate::holder::string;

/// `holds` in the order `list` prints them: by prefix (none first), then
/// by name under it.
pub fn sorted(mut holds: Vec<LockInfo>) -> Vec<LockInfo> {
    holds.sort_by(|a, b| (a.prefix(), a.key_in_prefix()).cmp(&(b.prefix(), b.key_in_prefix())));
    holds
}

/// A prefix as a column shows it: `-` for none.
fn column(prefix: Option<&str>) -> String {
    prefix.map_or_else(|| "-".to_owned(), plain)
}

/// A prefix as JSON: a string, or `null` for none.
fn json_prefix(prefix: Option<&str>) -> String {
    prefix.map_or_else(|| "null".to_owned(), string)
}

/// `list`: a table, one hold a line, under a header; each hold by its
/// prefix and its name under it.
pub fn table(holds: &[LockInfo]) -> String {
    let rows: Vec<[String; 7]> = holds
        .iter()
        .map(|i| {
            [
                column(i.prefix()),
                plain(i.key_in_prefix()),
                i.kind().as_str().to_owned(),
                plain(i.metadata()),
                millis(i.ttl()),
                i.fencing_token().to_string(),
                i.waiters().len().to_string(),
            ]
        })
        .collect();
    let header = [
        "PREFIX", "KEY", "KIND", "HOLDER", "MS_LEFT", "TOKEN", "WAITERS",
    ]
    .map(str::to_owned);
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// `list --json`: one array of objects on one line.
pub fn json(holds: &[LockInfo]) -> String {
    let items: Vec<String> = holds.iter().map(object).collect();
    format!("[{}]\n", items.join(","))
}

/// One hold as a JSON object: prefix (null for none), key (its name under
/// it), kind, holder (metadata), ms_left, fencing_token, waiters (their
/// metadata, in queue order).
fn object(i: &LockInfo) -> String {
    let waiters: Vec<String> = i.waiters().iter().map(|w| string(w)).collect();
    format!(
        "{{\"prefix\":{},\"key\":{},\"kind\":\"{}\",\"holder\":{},\"ms_left\":{},\
         \"fencing_token\":{},\"waiters\":[{}]}}",
        json_prefix(i.prefix()),
        string(i.key_in_prefix()),
        i.kind().as_str(),
        string(i.metadata()),
        millis(i.ttl()),
        i.fencing_token(),
        waiters.join(",")
    )
}

/// A hold as a line names it: `lock "nr" of prefix "jobs"`, or `lock "nr"`
/// without a prefix.
pub fn whose(i: &LockInfo) -> String {
    let kind = i.kind().as_str();
    match i.prefix() {
        Some(p) => format!("{kind} {:?} of prefix {p:?}", i.key_in_prefix()),
        None => format!("{kind} {:?}", i.key_in_prefix()),
    }
}

/// `break`: what was broken, one line.
pub fn broken(i: &LockInfo, reason: &str) -> String {
    format!(
        "broke {} held by {:?} (fencing token {}, {} ms left, {} waiting): {reason}\n",
        whose(i),
        i.metadata(),
        i.fencing_token(),
        millis(i.ttl()),
        i.waiters().len(),
        reason = plain(reason)
    )
}

/// `audit`: one event a line, `<UTC time> <prefix> <action> <kind> <key>
/// <holder> <token> <reason>`, the prefix `-` for none.
pub fn audit_text(events: &[AuditEntry]) -> String {
    let mut out = String::new();
    for e in events {
        out.push_str(&format!(
            "{} {} {} {} {} {:?} {} {}\n",
            utc(e.time()),
            column(e.prefix()),
            e.action(),
            e.kind().as_str(),
            plain(e.key()),
            e.metadata(),
            e.fencing_token(),
            plain(e.reason())
        ));
    }
    out
}

/// `text` for a line of its own: control characters (line breaks,
/// terminal escapes) written as escapes (`\n`, `\u{1b}`), so that a key,
/// a holder or a reason, which anyone may write, can neither forge a row
/// or an event nor reach the operator's terminal.
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// `audit --json`: one array of objects on one line.
pub fn audit_json(events: &[AuditEntry]) -> String {
    let items: Vec<String> = events
        .iter()
        .map(|e| {
            format!(
                "{{\"time\":\"{}\",\"prefix\":{},\"action\":{},\"kind\":\"{}\",\"key\":{},\
                 \"holder\":{},\"fencing_token\":{},\"reason\":{}}}",
                utc(e.time()),
                json_prefix(e.prefix()),
                string(e.action()),
                e.kind().as_str(),
                string(e.key()),
                string(e.metadata()),
                e.fencing_token(),
                string(e.reason())
            )
        })
        .collect();
    format!("[{}]\n", items.join(","))
}

/// Where else the name `key`, free under `prefix`, is held (`found`, each
/// under its own prefix), as a line for stderr: `"nr" is free under
/// prefix "job", but held under prefix "jobs"` (with `as "<name>"` when
/// its name there differs); `None` when nowhere.
pub fn elsewhere(key: &str, prefix: Option<&str>, found: &[LockInfo]) -> Option<String> {
    if found.is_empty() {
        return None;
    }
    let here = match prefix {
        Some(p) => format!("under prefix {p:?}"),
        None => "without a prefix".to_owned(),
    };
    let there: Vec<String> = found
        .iter()
        .map(|i| {
            let under = match i.prefix() {
                Some(p) => format!("prefix {p:?}"),
                None => "no prefix".to_owned(),
            };
            if i.key_in_prefix() == key {
                under
            } else {
                format!("{under} as {:?}", i.key_in_prefix())
            }
        })
        .collect();
    Some(format!(
        "{key:?} is free {here}, but held under {}",
        there.join(", ")
    ))
}

/// The prefixes of `events`' trails, as a line for stderr when a prefix's
/// trail is empty: `no audit trail under prefix "job"; trails under
/// prefix "jobs", no prefix`; `None` when there are none.
pub fn trails_elsewhere(prefix: &str, events: &[AuditEntry]) -> Option<String> {
    let mut prefixes: Vec<Option<&str>> = events.iter().map(AuditEntry::prefix).collect();
    prefixes.sort_unstable();
    prefixes.dedup();
    if prefixes.is_empty() {
        return None;
    }
    let named: Vec<String> = prefixes
        .iter()
        .map(|p| match p {
            Some(p) => format!("prefix {p:?}"),
            None => "no prefix".to_owned(),
        })
        .collect();
    Some(format!(
        "no audit event under prefix {prefix:?}; events under {}",
        named.join(", ")
    ))
}

/// A time left in whole milliseconds (`-` for a key with no expiry).
fn millis(d: Duration) -> String {
    if d == Duration::MAX {
        "-".to_owned()
    } else {
        d.as_millis().to_string()
    }
}

/// `t` as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC).
fn utc(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil(i64::try_from(days).unwrap_or(0));
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_millis()
    )
}

/// The date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_times() {
        assert_eq!(utc(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_795_671_238_320);
        assert_eq!(utc(t), "2026-11-26T05:33:58.320Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(utc(leap), "2000-02-29T00:00:00.000Z");
    }
}
