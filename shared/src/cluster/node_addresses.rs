//! Nodes' public addresses as creates need them: read once per node, not once per create.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a node's address is trusted without reading the node again. A node keeps its
/// address for its life; the bound covers a node name reused by a new instance, which a
/// stack's status read (that reads the node itself) corrects anyway.
const ADDRESS_TTL: Duration = Duration::from_secs(60);

/// Node name → its `ExternalIP`, with when it was read. Only known addresses are kept: a node
/// without one yet is read again by the next create.
#[derive(Default)]
pub(super) struct NodeAddresses {
    known: Mutex<HashMap<String, (String, Instant)>>,
}

impl NodeAddresses {
    /// The node's address as read within [`ADDRESS_TTL`] of `now`.
    pub(super) fn get(&self, node: &str, now: Instant) -> Option<String> {
        let known = self.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        known
            .get(node)
            .filter(|(_, read_at)| now.saturating_duration_since(*read_at) < ADDRESS_TTL)
            .map(|(address, _)| address.clone())
    }

    pub(super) fn remember(&self, node: &str, address: String, read_at: Instant) {
        let mut known = self.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        known.insert(node.to_owned(), (address, read_at));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_served_until_it_is_stale() {
        let addresses = NodeAddresses::default();
        let read_at = Instant::now();
        assert_eq!(addresses.get("n1", read_at), None);
        addresses.remember("n1", "203.0.113.7".into(), read_at);
        assert_eq!(
            addresses.get("n1", read_at + ADDRESS_TTL / 2).as_deref(),
            Some("203.0.113.7")
        );
        assert_eq!(addresses.get("n2", read_at), None);
        assert_eq!(addresses.get("n1", read_at + ADDRESS_TTL), None);
        addresses.remember("n1", "203.0.113.8".into(), read_at + ADDRESS_TTL);
        assert_eq!(
            addresses.get("n1", read_at + ADDRESS_TTL).as_deref(),
            Some("203.0.113.8")
        );
    }
}
