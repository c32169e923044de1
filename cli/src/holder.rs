//! `redmutex holder`: who holds a lock, and how many wait for it (as
//! `Locker::holder` reads them).

use redmutex::LockInfo;

/// The answer for people, one line.
pub fn text(info: Option<&LockInfo>, waiters: u64) -> String {
    match info {
        Some(info) => format!(
            "held by {:?}, {} ms left, fencing token {}, {waiters} waiting\n",
            info.metadata(),
            info.ttl().as_millis(),
            info.fencing_token()
        ),
        None => "free\n".to_owned(),
    }
}

/// The answer for programs, one JSON object on one line.
pub fn json(key: &str, info: Option<&LockInfo>, waiters: u64) -> String {
    let (holder, left, token) = match info {
        Some(i) => (
            string(i.metadata()),
            i.ttl().as_millis().to_string(),
            i.fencing_token().to_string(),
        ),
        None => ("null".to_owned(), "null".to_owned(), "null".to_owned()),
    };
    format!(
        "{{\"key\":{},\"holder\":{holder},\"ms_left\":{left},\"fencing_token\":{token},\
         \"waiters\":{waiters}}}\n",
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
