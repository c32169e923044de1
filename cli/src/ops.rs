//! `redmutex list`, `break` and `audit`: what an operator sees and does,
//! written for people (a table, a line) or programs (`--json`), each hold
//! and event with its prefix; and where else a name is held.

use std::time::Duration;

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
            e.time_rfc3339(),
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
                e.time_rfc3339(),
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
