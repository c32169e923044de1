//! Durations as an operator writes them on the command line.

use std::time::Duration;

/// Nanoseconds in each unit a duration may use, the longest suffix first
/// (so that `ms` is not read as `m`).
const UNITS: [(&str, u128); 4] = [
    ("ms", 1_000_000),
    ("h", 3_600_000_000_000),
    ("m", 60_000_000_000),
    ("s", 1_000_000_000),
];

/// A duration as `--ttl`, `-w` and the others take it: numbers with a unit
/// each, added up (`250ms`, `30s`, `1.5s`, `2m`, `1h30m`), or a bare
/// number of seconds as flock(1)'s `-w 10` (`0.5` too). Fractions are
/// read down to the nanosecond.
pub fn duration(text: &str) -> Result<Duration, String> {
    parse(text).ok_or_else(|| {
        format!("{text:?} is not a duration like 250ms, 1.5s, 2m or 1h30m (or 10, in seconds)")
    })
}

fn parse(text: &str) -> Option<Duration> {
    if !text.is_empty() && text.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return to_duration(number(text, 1_000_000_000)?);
    }
    let mut rest = text;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let (value, after) = rest.split_at(digits);
        let (unit, per) = UNITS.iter().find(|(u, _)| after.starts_with(u))?;
        total = total.checked_add(number(value, *per)?)?;
        rest = &after[unit.len()..];
    }
    if text.is_empty() {
        return None;
    }
    to_duration(total)
}

/// `text` (`10`, `1.5`: digits, at most one `.` with digits on both sides)
/// times `per` nanoseconds, rounded down to the nanosecond.
fn number(text: &str, per: u128) -> Option<u128> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty()
        || (text.contains('.') && fraction.is_empty())
        || !whole.chars().all(|c| c.is_ascii_digit())
        || !fraction.chars().all(|c| c.is_ascii_digit())
    {
        return None;
    }
    let mut nanos = whole.parse::<u128>().ok()?.checked_mul(per)?;
    // The digits past the 20th are below a nanosecond of any unit here.
    let mut scale = per;
    for digit in fraction.bytes().take(20) {
        scale /= 10;
        nanos = nanos.checked_add(u128::from(digit - b'0') * scale)?;
    }
    Some(nanos)
}

/// `nanos` as a `Duration`, when it fits one.
fn to_duration(nanos: u128) -> Option<Duration> {
    let secs = u64::try_from(nanos / 1_000_000_000).ok()?;
    let sub = u32::try_from(nanos % 1_000_000_000).ok()?;
    Some(Duration::new(secs, sub))
}

/// `d` as the command's options take it, the way a person writes it:
/// `0s`, `250ms`, `1.5s`, `1m30s`, `1h30m` (to the millisecond; below a
/// second, to the microsecond).
pub fn show(d: Duration) -> String {
    if d.is_zero() {
        return "0s".to_owned();
    }
    if d < Duration::from_secs(1) {
        let micros = d.as_micros();
        return format!("{}{}ms", micros / 1000, fraction(micros % 1000, 3));
    }
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    let millis = d.subsec_millis();
    if s > 0 || millis > 0 {
        out.push_str(&format!("{s}{}s", fraction(u128::from(millis), 3)));
    }
    out
}

/// `.` and the `digits`-digit fraction `part`, its trailing zeros left
/// out; nothing for zero.
fn fraction(part: u128, digits: usize) -> String {
    if part == 0 {
        return String::new();
    }
    let text = format!("{part:0digits$}");
    format!(".{}", text.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_shown_as_written() {
        for text in [
            "0s", "250ms", "0.5ms", "1s", "1.5s", "30s", "1m30s", "1h30m", "2h", "1h0m1s",
        ] {
            let d = duration(text).unwrap();
            let shown = show(d);
            assert_eq!(duration(&shown), Ok(d), "{text} shown as {shown}");
        }
        assert_eq!(show(Duration::from_secs(5400)), "1h30m");
        assert_eq!(show(Duration::from_millis(1500)), "1.5s");
        assert_eq!(show(Duration::from_millis(3_021)), "3.021s");
        assert_eq!(show(Duration::from_secs(10) / 3), "3.333s");
        assert_eq!(show(Duration::from_secs(1) / 3), "333.333ms");
        assert_eq!(show(Duration::from_nanos(1)), "0ms");
        assert_eq!(show(Duration::from_secs(3601)), "1h1s");
    }

    #[test]
    fn durations() {
        let ms = Duration::from_millis;
        for (text, want) in [
            ("500ms", ms(500)),
            ("30s", ms(30_000)),
            ("2m", ms(120_000)),
            ("1h", ms(3_600_000)),
            ("1.5s", ms(1_500)),
            ("1h30m", ms(5_400_000)),
            ("1m30s", ms(90_000)),
            ("1h0.5m", ms(3_630_000)),
            ("0.25h", ms(900_000)),
            ("10", ms(10_000)),
            ("0.5", ms(500)),
            ("0s", ms(0)),
            ("0", ms(0)),
            ("1.0000000005s", Duration::new(1, 0)),
            ("0.5ms", Duration::from_micros(500)),
        ] {
            assert_eq!(duration(text), Ok(want), "{text}");
        }
        for bad in [
            "",
            "s",
            "1.s",
            ".5s",
            "1.5.5s",
            "-1s",
            "10d",
            "1x",
            "1h-30m",
            "1s ",
            " 1s",
            "1.s5",
            "99999999999999999999h",
            "1e3s",
        ] {
            assert!(duration(bad).is_err(), "{bad}");
        }
    }
}
