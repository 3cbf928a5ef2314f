//! Which Service of the cluster holds each node port (pure).
//!
//! kube-proxy forwards a Service's node port on every node, and its `KUBE-NODEPORTS` rule
//! comes before CNI portmap's host-port rule: a host port that a Service also holds leads
//! its participants to that Service. The port picker keeps these ports from new stacks; the
//! lifecycle rule fails a hostport stack whose port a Service took after it (`port_taken`).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Service;

use crate::model::PortMapping;

/// One Service port's claim on a node port.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Holder {
    /// As the Service spells it: `TCP` (the default), `UDP` or `SCTP`.
    protocol: String,
    /// `namespace/name`.
    service: String,
}

/// The node ports of a set of Services, with who holds each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NodePortHolders {
    by_port: HashMap<u16, Vec<Holder>>,
}

/// `(node port, protocol, namespace/name)` of each of a Service's node ports.
pub(crate) type HeldNodePort = (u16, String, String);

/// The node ports `service` holds.
pub(crate) fn held_by(service: &Service) -> Vec<HeldNodePort> {
    let name = format!(
        "{}/{}",
        service.metadata.namespace.as_deref().unwrap_or_default(),
        service.metadata.name.as_deref().unwrap_or_default()
    );
    service
        .spec
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .filter_map(|p| {
            let port = u16::try_from(p.node_port?).ok()?;
            Some((port, p.protocol.clone().unwrap_or_else(|| "TCP".into()), name.clone()))
        })
        .collect()
}

impl FromIterator<HeldNodePort> for NodePortHolders {
    fn from_iter<I: IntoIterator<Item = HeldNodePort>>(held: I) -> Self {
        let mut by_port: HashMap<u16, Vec<Holder>> = HashMap::new();
        for (port, protocol, service) in held {
            by_port.entry(port).or_default().push(Holder { protocol, service });
        }
        Self { by_port }
    }
}

impl NodePortHolders {
    /// Every node port held, whatever its protocol (the apiserver allocates node ports by
    /// number alone).
    pub(crate) fn ports(&self) -> impl Iterator<Item = u16> + '_ {
        self.by_port.keys().copied()
    }

    /// The first of `ports` (a stack's host ports) that a Service holds for the same
    /// protocol, with that Service's `namespace/name`.
    pub(crate) fn taken<'a>(&'a self, ports: &'a [PortMapping]) -> Option<(&'a PortMapping, &'a str)> {
        ports.iter().find_map(|mapping| {
            let holders = self.by_port.get(&mapping.node_port)?;
            let holder = holders.iter().find(|h| h.protocol == mapping.protocol.as_str())?;
            Some((mapping, holder.service.as_str()))
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::Protocol;

    fn service(namespace: &str, name: &str, ports: serde_json::Value) -> Service {
        serde_json::from_value(json!({
            "metadata": {"namespace": namespace, "name": name},
            "spec": {"type": "NodePort", "ports": ports},
        }))
        .unwrap()
    }

    fn mapping(node_port: u16, protocol: Protocol) -> PortMapping {
        PortMapping {
            container_port: 80,
            protocol,
            node_port,
        }
    }

    #[test]
    fn a_host_port_is_taken_by_a_service_holding_it_for_the_same_protocol() {
        let holders: NodePortHolders = [
            service("monitoring", "grafana", json!([{"port": 80, "nodePort": 31005}])),
            service(
                "dns",
                "resolver",
                json!([{"port": 53, "protocol": "UDP", "nodePort": 31006}]),
            ),
            // A ClusterIP service holds no node port.
            service("default", "kubernetes", json!([{"port": 443}])),
        ]
        .iter()
        .flat_map(held_by)
        .collect();
        let mut ports: Vec<u16> = holders.ports().collect();
        ports.sort_unstable();
        assert_eq!(ports, [31005, 31006]);

        let tcp = [mapping(31004, Protocol::Tcp), mapping(31005, Protocol::Tcp)];
        let (port, service) = holders.taken(&tcp).expect("31005/TCP is grafana's");
        assert_eq!((port.node_port, service), (31005, "monitoring/grafana"));
        // kube-proxy's rule matches the protocol: a UDP node port leaves a TCP host port alone.
        assert_eq!(holders.taken(&[mapping(31006, Protocol::Tcp)]), None);
        assert_eq!(
            holders.taken(&[mapping(31006, Protocol::Udp)]).map(|(_, s)| s),
            Some("dns/resolver")
        );
        assert_eq!(holders.taken(&[]), None);
        assert_eq!(NodePortHolders::default().taken(&tcp), None);
    }
}
