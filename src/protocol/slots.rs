//! Redis Cluster hash slots, computed on the client: CRC16 (XMODEM) of the
//! key's hash tag, modulo 16384, exactly as the server does.

use std::sync::OnceLock;

/// The number of hash slots in a Redis Cluster.
pub(crate) const SLOTS: u16 = 16384;

/// CRC16/XMODEM (polynomial 0x1021, initial value 0), the checksum Redis
/// Cluster uses for key slots.
fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &b| {
        let mut crc = crc ^ (u16::from(b) << 8);
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
        crc
    })
}

/// The part of `key` that decides its slot: the text between the first `{`
/// and the next `}`, when that is not empty; otherwise the whole key.
pub(crate) fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{') {
        let rest = key.get(open + 1..).unwrap_or("");
        if let Some(close) = rest.find('}') {
            if close > 0 {
                return rest.get(..close).unwrap_or(key);
            }
        }
    }
    key
}

/// The hash slot of `key`.
pub(crate) fn slot(key: &str) -> u16 {
    crc16(hash_tag(key).as_bytes()) % SLOTS
}

/// The hash slot of a key given as bytes, as the server computes it: a
/// caller's key need not be UTF-8, and a lossy reading of it (U+FFFD for
/// each bad byte) hashes elsewhere. The tag is found as [`hash_tag`] finds
/// it, byte by byte.
pub(crate) fn slot_of_bytes(key: &[u8]) -> u16 {
    let mut tag = key;
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        let rest = key.get(open + 1..).unwrap_or_default();
        if let Some(close) = rest.iter().position(|&b| b == b'}') {
            if close > 0 {
                tag = rest.get(..close).unwrap_or(key);
            }
        }
    }
    crc16(tag) % SLOTS
}

/// A short hash tag for every slot: `tag_for(s)` hashes to slot `s`. Built
/// once, on first use in cluster mode, by trying short strings in order.
pub(crate) fn tag_for(slot: u16) -> &'static str {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        let mut tags: Vec<Option<String>> = vec![None; usize::from(SLOTS)];
        let mut missing = usize::from(SLOTS);
        let alphabet = b"0123456789abcdefghijklmnopqrstuvwxyz";
        let mut n: u64 = 0;
        while missing > 0 {
            // n in base 36, as the candidate tag.
            let mut candidate = Vec::new();
            let mut v = n;
            loop {
                let digit = usize::try_from(v % 36).unwrap_or(0);
                candidate.push(alphabet.get(digit).copied().unwrap_or(b'0'));
                v /= 36;
                if v == 0 {
                    break;
                }
            }
            let candidate = String::from_utf8(candidate).unwrap_or_default();
            let s = usize::from(crc16(candidate.as_bytes()) % SLOTS);
            if let Some(entry @ None) = tags.get_mut(s) {
                *entry = Some(candidate);
                missing -= 1;
            }
            n += 1;
        }
        tags.into_iter().map(Option::unwrap_or_default).collect()
    });
    tags.get(usize::from(slot)).map_or("", String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_slots() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("bar"), 5061);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("{order42}:a"), slot("order42"));
    }

    #[test]
    fn hash_tags_follow_the_spec() {
        assert_eq!(hash_tag("{user1000}.following"), "user1000");
        assert_eq!(hash_tag("foo{}{bar}"), "foo{}{bar}"); // empty first tag: whole key
        assert_eq!(hash_tag("foo{{bar}}zap"), "{bar");
        assert_eq!(hash_tag("foo{bar}{zap}"), "bar");
        assert_eq!(hash_tag("no tag"), "no tag");
        assert_eq!(hash_tag("open{only"), "open{only");
    }

    #[test]
    fn keys_as_bytes_are_slotted_as_the_server_slots_them() {
        for k in [
            "{user1000}.following",
            "foo{}{bar}",
            "foo{{bar}}zap",
            "foo{bar}{zap}",
            "no tag",
            "open{only",
        ] {
            assert_eq!(slot_of_bytes(k.as_bytes()), slot(k), "{k}");
        }
        // 0xff is no UTF-8: hashed as the byte it is, not as U+FFFD.
        assert_eq!(slot_of_bytes(b"\xff"), crc16(b"\xff") % SLOTS);
        assert_ne!(slot_of_bytes(b"\xff"), slot("\u{fffd}"));
        assert_eq!(slot_of_bytes(b"\xff{t}\xfe"), slot("t"));
    }

    #[test]
    fn every_slot_has_a_tag() {
        for s in [0, 1, 5061, 12182, SLOTS - 1] {
            let tag = tag_for(s);
            assert!(!tag.is_empty() && tag.len() <= 4, "{tag}");
            assert_eq!(slot(&format!("x{{{tag}}}y")), s);
        }
        assert_eq!((0..SLOTS).filter(|&s| slot(tag_for(s)) == s).count(), 16384);
    }
}
