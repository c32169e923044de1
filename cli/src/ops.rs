//! `redmutex list`, `break` and `audit`: what an operator sees and does,
//! written for people (a table, a line) or programs (`--json`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redmutex::{AuditEntry, LockInfo};

use crate::holder::string;

/// `list`: a table, one hold a line, under a header.
pub fn table(holds: &[LockInfo]) -> String {
    let rows: Vec<[String; 6]> = holds
        .iter()
        .map(|i| {
            [
                plain(i.key()),
                i.kind().as_str().to_owned(),
                plain(i.metadata()),
                millis(i.ttl()),
                i.fencing_token().to_string(),
                i.waiters().len().to_string(),
            ]
        })
        .collect();
    let header = ["KEY", "KIND", "HOLDER", "MS_LEFT", "TOKEN", "WAITERS"].map(str::to_owned);
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

/// One hold as a JSON object: key, kind, holder (metadata), ms_left,
/// fencing_token, waiters (their metadata, in queue order).
fn object(i: &LockInfo) -> String {
    let waiters: Vec<String> = i.waiters().iter().map(|w| string(w)).collect();
    format!(
        "{{\"key\":{},\"kind\":\"{}\",\"holder\":{},\"ms_left\":{},\"fencing_token\":{},\
         \"waiters\":[{}]}}",
        string(i.key()),
        i.kind().as_str(),
        string(i.metadata()),
        millis(i.ttl()),
        i.fencing_token(),
        waiters.join(",")
    )
}

/// `break`: what was broken, one line.
pub fn broken(i: &LockInfo, reason: &str) -> String {
    format!(
        "broke {} {:?} held by {:?} (fencing token {}, {} ms left, {} waiting): {reason}\n",
        i.kind().as_str(),
        i.key(),
        i.metadata(),
        i.fencing_token(),
        millis(i.ttl()),
        i.waiters().len(),
        reason = plain(reason)
    )
}

/// `audit`: one event a line, `<UTC time> <action> <kind> <key> <holder>
/// <token> <reason>`.
pub fn audit_text(events: &[AuditEntry]) -> String {
    let mut out = String::new();
    for e in events {
        out.push_str(&format!(
            "{} {} {} {} {:?} {} {}\n",
            utc(e.time()),
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
                "{{\"time\":\"{}\",\"action\":{},\"kind\":\"{}\",\"key\":{},\"holder\":{},\
                 \"fencing_token\":{},\"reason\":{}}}",
                utc(e.time()),
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
