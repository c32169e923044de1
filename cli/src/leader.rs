//! `redmutex leader` and `redmutex observe`: an election's leader (with
//! the candidates queued, for `leader`), and each change of it, as lines.

use redmutex::Leader;

/// The answer for people, one line.
pub fn text(leader: Option<&Leader>) -> String {
    match leader {
        Some(l) => format!(
            "led by {:?}, term {}, {} ms left\n",
            l.value(),
            l.term(),
            l.ttl().as_millis()
        ),
        None => "no leader\n".to_owned(),
    }
}

/// The candidates queued, in their order, as a line for people (nothing
/// when none is).
pub fn queued_text(queued: &[String]) -> String {
    if queued.is_empty() {
        return String::new();
    }
    let values: Vec<String> = queued.iter().map(|v| crate::holder::string(v)).collect();
    format!("queued: {}\n", values.join(", "))
}

/// The answer for programs, one JSON object on one line; with `queued`
/// (`leader`, not `observe`), the candidates queued as `"queued":[...]`.
pub fn json(election: &str, leader: Option<&Leader>, queued: Option<&[String]>) -> String {
    let (value, term, left) = match leader {
        Some(l) => (
            crate::holder::string(l.value()),
            l.term().to_string(),
            l.ttl().as_millis().to_string(),
        ),
        None => ("null".to_owned(), "null".to_owned(), "null".to_owned()),
    };
    let queued = queued.map_or(String::new(), |q| {
        let values: Vec<String> = q.iter().map(|v| crate::holder::string(v)).collect();
        format!(",\"queued\":[{}]", values.join(","))
    });
    format!(
        "{{\"election\":{},\"leader\":{value},\"term\":{term},\"ms_left\":{left}{queued}}}\n",
        crate::holder::string(election)
    )
}

/// Where else the election `name`, leaderless under `prefix`, has a
/// leader (under each of `found`), as a line for stderr; `None` when
/// nowhere.
pub fn elsewhere(name: &str, prefix: Option<&str>, found: &[Option<&str>]) -> Option<String> {
    if found.is_empty() {
        return None;
    }
    let under = |p: Option<&str>| match p {
        Some(p) => format!("under prefix {p:?}"),
        None => "without a prefix".to_owned(),
    };
    let there: Vec<String> = found.iter().map(|p| under(*p)).collect();
    Some(format!(
        "election {name:?} has no leader {}, but has one {}",
        under(prefix),
        there.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_leader_in_words_and_in_json() {
        assert_eq!(text(None), "no leader\n");
        assert_eq!(
            json("a\"b", None, None),
            "{\"election\":\"a\\\"b\",\"leader\":null,\"term\":null,\"ms_left\":null}\n"
        );
        assert_eq!(queued_text(&[]), "");
        let queued = ["v2".to_owned(), "a\"b".to_owned()];
        assert_eq!(queued_text(&queued), "queued: \"v2\", \"a\\\"b\"\n");
        assert!(json("e", None, Some(&queued)).ends_with(",\"queued\":[\"v2\",\"a\\\"b\"]}\n"));
    }
}
