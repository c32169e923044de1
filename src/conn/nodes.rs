//! A Redis Cluster's nodes, for the sharded release listener
//! (`wake/shards.rs`): which master serves a slot (`CLUSTER SLOTS`, asked
//! through the pool), and a plain connection of its own to one node.
//!
//! The connection is opened with the pool's settings (user, password, TLS,
//! protocol) when the pool is a [`ClusterManager`](super::ClusterManager)'s,
//! as [`cluster_pool`](crate::cluster_pool) builds it. A pool of a plain
//! `ClusterClient` does not show them (redis-rs keeps them to itself): its
//! connection is opened from the node's address alone, so on a cluster that
//! wants a password or TLS the subscription fails, and waiters poll with
//! their backoff (said once in a log event).

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use redis::{ConnectionInfo, Value};

use crate::Error;

/// A node, known by its address (as `CLUSTER SLOTS` or a `MOVED`
/// redirection gives it), and the settings to connect to it with, when
/// the pool shows them.
#[derive(Clone)]
pub(crate) struct Node {
    pub(crate) host: String,
    pub(crate) port: u16,
    /// The pool's connection settings, any node's address in them.
    settings: Option<Arc<ConnectionInfo>>,
}

impl Node {
    /// The node of a `MOVED` redirection's `host:port` (an IPv6 host keeps
    /// its colons: the port is after the last one), reached with the
    /// settings of `like`, a node of the same cluster.
    pub(crate) fn parse(addr: &str, like: &Node) -> Option<Node> {
        let (host, port) = addr.rsplit_once(':')?;
        Some(Node {
            host: host.to_owned(),
            port: port.parse().ok()?,
            settings: like.settings.clone(),
        })
    }

    /// This node, reached with `settings` (a pool's connection settings,
    /// any node's address in them).
    pub(crate) fn with_settings(mut self, settings: Option<Arc<ConnectionInfo>>) -> Node {
        self.settings = settings;
        self
    }

    /// A plain connection to this node, connected within `io`.
    pub(crate) fn connect(&self, io: Duration) -> Result<redis::Connection, Error> {
        let info = match &self.settings {
            Some(settings) => super::cluster::at(settings, &self.host, self.port),
            None => redis::IntoConnectionInfo::into_connection_info(redis::ConnectionAddr::Tcp(
                self.host.clone(),
                self.port,
            ))?,
        };
        let client = redis::Client::open(info)?;
        Ok(client.get_connection_with_timeout(io)?)
    }
}

/// A node is its address: the same node whatever it was found with.
impl PartialEq for Node {
    fn eq(&self, other: &Node) -> bool {
        self.host == other.host && self.port == other.port
    }
}

impl Eq for Node {}

impl Hash for Node {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.host.hash(state);
        self.port.hash(state);
    }
}

/// The address only: the settings hold the password.
impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Node({}:{})", self.host, self.port)
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
        (!host.is_empty()).then_some(Node {
            host,
            port,
            settings: None,
        })
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
                settings: None,
            })
        };
        assert_eq!(master_of(&slots, 0), node("10.0.0.1", 7000));
        assert_eq!(master_of(&slots, 5461), node("10.0.0.2", 7001));
        assert_eq!(master_of(&slots, 12000), None, "an unnamed node");
        assert_eq!(master_of(&Value::Nil, 1), None);
    }

    #[test]
    fn parses_a_redirection() {
        let like = Node {
            host: "10.0.0.1".into(),
            port: 7000,
            settings: redis::IntoConnectionInfo::into_connection_info("redis://10.0.0.1:7000/")
                .ok()
                .map(Arc::new),
        };
        let parsed = Node::parse("127.0.0.1:7001", &like);
        assert_eq!(
            parsed,
            Some(Node {
                host: "127.0.0.1".into(),
                port: 7001,
                settings: None,
            })
        );
        assert!(
            parsed.is_some_and(|n| n.settings.is_some()),
            "reached as the node it came from"
        );
        assert_eq!(
            Node::parse("::1:7001", &like).map(|n| n.host),
            Some("::1".into())
        );
        assert_eq!(Node::parse("nohost", &like), None);
        assert_eq!(Node::parse("h:x", &like), None);
    }
}
