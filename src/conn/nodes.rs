//! A Redis Cluster's nodes, for the sharded release listener
//! (`wake/shards.rs`): which master serves a slot (`CLUSTER SLOTS`, asked
//! through the pool), and a plain connection of its own to one node.
//!
//! The connection is opened from the node's address alone: redis-rs does
//! not show a `ClusterClient`'s credentials or TLS settings, so on a cluster
//! that wants a password or TLS the subscription fails, and waiters poll
//! with their backoff (said once in a log event).

use std::time::Duration;

use redis::Value;

use crate::Error;

/// A node's address, as `CLUSTER SLOTS` or a `MOVED` redirection gives it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Node {
    pub(crate) host: String,
    pub(crate) port: u16,
}

impl Node {
    /// The node of a `MOVED` redirection's `host:port` (an IPv6 host keeps
    /// its colons: the port is after the last one).
    pub(crate) fn parse(addr: &str) -> Option<Node> {
        let (host, port) = addr.rsplit_once(':')?;
        Some(Node {
            host: host.to_owned(),
            port: port.parse().ok()?,
        })
    }

    /// A plain connection to this node, connected within `io`.
    pub(crate) fn connect(&self, io: Duration) -> Result<redis::Connection, Error> {
        let info = redis::ConnectionAddr::Tcp(self.host.clone(), self.port);
        let client = redis::Client::open(info)?;
        Ok(client.get_connection_with_timeout(io)?)
    }
}

/// The master that serves `slot`, in a `CLUSTER SLOTS` reply: ranges of
/// `[first, last, [host, port, id], replicas...]`. An empty host means the
/// node the reply came from, which this cannot name: `None`, as for a slot
/// no range covers.
pub(crate) fn master_of(slots: &Value, slot: u16) -> Option<Node> {
    let Value::Array(ranges) = slots else {
        return None;
    };
    ranges.iter().find_map(|range| {
        let Value::Array(parts) = range else {
            return None;
        };
        let (first, last) = (int(parts.first()?)?, int(parts.get(1)?)?);
        if !(first..=last).contains(&i64::from(slot)) {
            return None;
        }
        let Value::Array(master) = parts.get(2)? else {
            return None;
        };
        let host = match master.first()? {
            Value::BulkString(b) => String::from_utf8(b.clone()).ok()?,
            Value::SimpleString(s) => s.clone(),
            _ => return None,
        };
        let port = u16::try_from(int(master.get(1)?)?).ok()?;
        (!host.is_empty()).then_some(Node { host, port })
    })
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(first: i64, last: i64, host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::Int(first),
            Value::Int(last),
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ]),
        ])
    }

    #[test]
    fn finds_the_master_of_a_slot() {
        let slots = Value::Array(vec![
            range(0, 5460, "10.0.0.1", 7000),
            range(5461, 10922, "10.0.0.2", 7001),
            range(10923, 16383, "", 7002),
        ]);
        let node = |host: &str, port| {
            Some(Node {
                host: host.to_owned(),
                port,
            })
        };
        assert_eq!(master_of(&slots, 0), node("10.0.0.1", 7000));
        assert_eq!(master_of(&slots, 5461), node("10.0.0.2", 7001));
        assert_eq!(master_of(&slots, 12000), None, "an unnamed node");
        assert_eq!(master_of(&Value::Nil, 1), None);
    }

    #[test]
    fn parses_a_redirection() {
        assert_eq!(
            Node::parse("127.0.0.1:7001"),
            Some(Node {
                host: "127.0.0.1".into(),
                port: 7001
            })
        );
        assert_eq!(Node::parse("::1:7001").map(|n| n.host), Some("::1".into()));
        assert_eq!(Node::parse("nohost"), None);
        assert_eq!(Node::parse("h:x"), None);
    }
}
