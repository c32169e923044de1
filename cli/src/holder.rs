//! `redmutex holder`: who holds a lock, and how many wait for it (as
//! `Locker::holder` reads them, under the lock's own prefix).

use redmutex::LockInfo;

/// The answer for people, one line; with the hold's own prefix and name
/// when they are not those asked (`prefix`, `key`): a lock key given
/// without its prefix.
pub fn text(prefix: Option<&str>, key: &str, info: Option<&LockInfo>, waiters: u64) -> String {
    match info {
        Some(info) => {
            let own = (info.prefix(), info.key_in_prefix()) == (prefix, key);
            let of = match info.prefix() {
                Some(p) => format!("of prefix {p:?}"),
                None => "of no prefix".to_owned(),
            };
            let under = if own {
                String::new()
            } else {
                format!(
                    " ({} {:?} {of})",
                    info.kind().as_str(),
                    info.key_in_prefix()
                )
            };
            format!(
                "held by {:?}, {} ms left, fencing token {}, {waiters} waiting{under}\n",
                info.metadata(),
                info.ttl().as_millis(),
                info.fencing_token()
            )
        }
        None => "free\n".to_owned(),
    }
}

/// The answer for programs, one JSON object on one line: the hold's own
/// prefix (null for none) and its name under it (those asked when free).
pub fn json(prefix: Option<&str>, key: &str, info: Option<&LockInfo>, waiters: u64) -> String {
    let (holder, left, token) = match info {
        Some(i) => (
            string(i.metadata()),
            i.ttl().as_millis().to_string(),
            i.fencing_token().to_string(),
        ),
        None => ("null".to_owned(), "null".to_owned(), "null".to_owned()),
    };
    let (prefix, key) = info.map_or((prefix, key), |i| (i.prefix(), i.key_in_prefix()));
    let prefix = prefix.map_or_else(|| "null".to_owned(), string);
    format!(
        "{{\"prefix\":{prefix},\"key\":{},\"holder\":{holder},\"ms_left\":{left},\
         \"fencing_token\":{token},\"waiters\":{waiters}}}\n",
        string(key)
    )
}

/// `text` as a JSON string.
pub fn string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(string("a\"b\\c\nd"), r#""a\"b\\c\u000ad""#);
    }
}
