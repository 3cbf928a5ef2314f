//! Nodes' public addresses as creates need them: read once per node, not once per create.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;

use super::node_external_ip;

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

    /// Keeps the address of `node`, as read at `read_at`, and returns it (none if it has none).
    pub(super) fn remember(&self, node: &Node, read_at: Instant) -> Option<String> {
        let (name, address) = (node.metadata.name.as_ref()?, node_external_ip(node)?);
        let mut known = self.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        known.insert(name.clone(), (address.clone(), read_at));
        Some(address)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus};

    use super::*;

    fn node(name: &str, external_ip: Option<&str>) -> Node {
        Node {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            status: Some(NodeStatus {
                addresses: Some(
                    external_ip
                        .map(|ip| NodeAddress {
                            type_: "ExternalIP".into(),
                            address: ip.into(),
                        })
                        .into_iter()
                        .collect(),
                ),
                ..NodeStatus::default()
            }),
            ..Node::default()
        }
    }

    #[test]
    fn an_address_is_served_until_it_is_stale() {
        let addresses = NodeAddresses::default();
        let read_at = Instant::now();
        assert_eq!(addresses.get("n1", read_at), None);
        assert_eq!(
            addresses.remember(&node("n1", Some("203.0.113.7")), read_at).as_deref(),
            Some("203.0.113.7")
        );
        assert_eq!(
            addresses.get("n1", read_at + ADDRESS_TTL / 2).as_deref(),
            Some("203.0.113.7")
        );
        assert_eq!(addresses.get("n2", read_at), None);
        assert_eq!(addresses.get("n1", read_at + ADDRESS_TTL), None);
        addresses.remember(&node("n1", Some("203.0.113.8")), read_at + ADDRESS_TTL);
        assert_eq!(
            addresses.get("n1", read_at + ADDRESS_TTL).as_deref(),
            Some("203.0.113.8")
        );
    }

    #[test]
    fn a_node_without_an_address_is_not_remembered() {
        let addresses = NodeAddresses::default();
        let read_at = Instant::now();
        assert_eq!(addresses.remember(&node("n1", None), read_at), None);
        assert_eq!(addresses.get("n1", read_at), None);
    }
}
