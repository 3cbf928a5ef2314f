//! Where stacks are reached, as the cluster, the records and the API's answers tell it, and the
//! checks between them (pure): no two stacks on one endpoint, and everyone telling the same.
//!
//! With node ports every node forwards the port, so an endpoint is the port alone; with host
//! ports it is (node, port). Ports are compared without their protocol: the benchmarks expose
//! TCP only.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::ResourceExt;
use stack_core::STACK_ID_LABEL;

/// How the API exposes stacks (`STACK_EXPOSURE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposure {
    /// A NodePort Service per stack: ports are unique in the cluster.
    NodePort,
    /// A `hostPort` per target port, no Service: ports are unique per node.
    HostPort,
}

impl Exposure {
    pub fn parse(value: &str) -> Option<Self> {
        match value.to_ascii_lowercase().as_str() {
            "nodeport" => Some(Exposure::NodePort),
            "hostport" => Some(Exposure::HostPort),
            _ => None,
        }
    }

    /// The value of `STACK_EXPOSURE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Exposure::NodePort => "nodeport",
            Exposure::HostPort => "hostport",
        }
    }
}

/// One place a stack is reached at.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Endpoint {
    /// `None` for a node port (any node), or a host port whose pod has no node yet.
    pub node: Option<String>,
    pub port: u16,
}

/// Each stack's endpoints, by stack id.
pub type Endpoints = BTreeMap<String, BTreeSet<Endpoint>>;

/// The host ports of each pod's containers, on the pod's node, by the pod's stack id.
pub fn of_pods(pods: &[Pod]) -> Endpoints {
    let mut endpoints = Endpoints::new();
    for pod in pods {
        let Some(id) = pod.labels().get(STACK_ID_LABEL) else {
            continue;
        };
        let spec = pod.spec.as_ref();
        let node = spec.and_then(|s| s.node_name.clone());
        let ports = spec
            .into_iter()
            .flat_map(|s| &s.containers)
            .flat_map(|c| c.ports.iter().flatten())
            .filter_map(|p| p.host_port.and_then(|h| u16::try_from(h).ok()));
        let stack = endpoints.entry(id.clone()).or_default();
        stack.extend(ports.map(|port| Endpoint {
            node: node.clone(),
            port,
        }));
    }
    endpoints
}

/// The node ports of each service, by the service's stack id.
pub fn of_services(services: &[Service]) -> Endpoints {
    let mut endpoints = Endpoints::new();
    for service in services {
        let Some(id) = service.labels().get(STACK_ID_LABEL) else {
            continue;
        };
        let ports = service
            .spec
            .iter()
            .flat_map(|s| s.ports.iter().flatten())
            .filter_map(|p| p.node_port.and_then(|n| u16::try_from(n).ok()));
        let stack = endpoints.entry(id.clone()).or_default();
        stack.extend(ports.map(|port| Endpoint { node: None, port }));
    }
    endpoints
}

/// What a record or an answer says: `node_id` and `ports[].node_port`.
pub fn claimed(exposure: Exposure, node_id: &str, ports: impl IntoIterator<Item = u16>) -> BTreeSet<Endpoint> {
    let node = match exposure {
        Exposure::HostPort if !node_id.is_empty() => Some(node_id.to_owned()),
        _ => None,
    };
    ports
        .into_iter()
        .map(|port| Endpoint {
            node: node.clone(),
            port,
        })
        .collect()
}

/// Endpoints held by more than one stack.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Duplicates {
    /// Endpoints counted (placed ones, with host ports).
    pub endpoints: usize,
    /// Endpoints beyond the first holder of each.
    pub duplicates: usize,
    /// Host ports whose pod has no node yet: not counted.
    pub unplaced: usize,
    /// A few of the endpoints held twice or more.
    pub examples: Vec<Endpoint>,
}

pub fn duplicates(exposure: Exposure, endpoints: &Endpoints) -> Duplicates {
    let mut holders: HashMap<&Endpoint, usize> = HashMap::new();
    let mut unplaced = 0;
    for endpoint in endpoints.values().flatten() {
        if exposure == Exposure::HostPort && endpoint.node.is_none() {
            unplaced += 1;
        } else {
            *holders.entry(endpoint).or_default() += 1;
        }
    }
    let mut examples: Vec<Endpoint> = holders
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(e, _)| (*e).clone())
        .collect();
    examples.sort();
    examples.truncate(5);
    Duplicates {
        endpoints: holders.values().sum(),
        duplicates: holders.values().map(|n| n - 1).sum(),
        unplaced,
        examples,
    }
}

/// How far what was claimed (records or answers) matches the cluster, stack by stack.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Agreement {
    /// Stacks claimed.
    pub claimed: usize,
    /// Same endpoints as the cluster's.
    pub agree: usize,
    /// Same ports, told before the pod had a node (a `creating` answer with host ports).
    pub told_before_placement: usize,
    /// Different endpoints.
    pub differ: usize,
    /// Claimed, but the cluster has no object of the stack.
    pub missing_in_cluster: usize,
    /// Objects in the cluster no claim names.
    pub unclaimed_in_cluster: usize,
}

pub fn agreement(claims: &Endpoints, cluster: &Endpoints) -> Agreement {
    let mut result = Agreement {
        claimed: claims.len(),
        unclaimed_in_cluster: cluster.keys().filter(|id| !claims.contains_key(*id)).count(),
        ..Agreement::default()
    };
    let ports = |set: &BTreeSet<Endpoint>| set.iter().map(|e| e.port).collect::<BTreeSet<u16>>();
    for (id, claimed) in claims {
        match cluster.get(id) {
            None => result.missing_in_cluster += 1,
            Some(actual) if actual == claimed => result.agree += 1,
            Some(actual) if claimed.iter().all(|e| e.node.is_none()) && ports(actual) == ports(claimed) => {
                result.told_before_placement += 1;
            }
            Some(_) => result.differ += 1,
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, ContainerPort, PodSpec, ServicePort, ServiceSpec};
    use kube::api::ObjectMeta;

    fn meta(id: &str) -> ObjectMeta {
        ObjectMeta {
            labels: Some(BTreeMap::from([(STACK_ID_LABEL.to_owned(), id.to_owned())])),
            ..ObjectMeta::default()
        }
    }

    fn pod(id: &str, node: Option<&str>, host_port: i32) -> Pod {
        Pod {
            metadata: meta(id),
            spec: Some(PodSpec {
                node_name: node.map(str::to_owned),
                containers: vec![Container {
                    ports: Some(vec![ContainerPort {
                        container_port: 1337,
                        host_port: Some(host_port),
                        ..ContainerPort::default()
                    }]),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            status: None,
        }
    }

    fn service(id: &str, node_port: i32) -> Service {
        Service {
            metadata: meta(id),
            spec: Some(ServiceSpec {
                ports: Some(vec![ServicePort {
                    port: 1337,
                    node_port: Some(node_port),
                    ..ServicePort::default()
                }]),
                ..ServiceSpec::default()
            }),
            status: None,
        }
    }

    fn at(node: Option<&str>, port: u16) -> Endpoint {
        Endpoint {
            node: node.map(str::to_owned),
            port,
        }
    }

    #[test]
    fn one_host_port_on_two_nodes_is_no_duplicate_but_twice_on_one_node_is() {
        let pods = [
            pod("a", Some("n1"), 31001),
            pod("b", Some("n2"), 31001),
            pod("c", Some("n1"), 31001),
            pod("d", None, 31002),
        ];
        let found = duplicates(Exposure::HostPort, &of_pods(&pods));
        assert_eq!(
            found,
            Duplicates {
                endpoints: 3,
                duplicates: 1,
                unplaced: 1,
                examples: vec![at(Some("n1"), 31001)],
            }
        );
    }

    #[test]
    fn node_ports_are_unique_in_the_cluster() {
        let services = [service("a", 31001), service("b", 31002), service("c", 31001)];
        let endpoints = of_services(&services);
        assert_eq!(endpoints["a"], BTreeSet::from([at(None, 31001)]));
        let found = duplicates(Exposure::NodePort, &endpoints);
        assert_eq!((found.endpoints, found.duplicates), (3, 1));
    }

    #[test]
    fn claims_are_compared_stack_by_stack() {
        let cluster = of_pods(&[
            pod("a", Some("n1"), 31001),
            pod("b", Some("n2"), 31002),
            pod("c", Some("n1"), 31003),
            pod("e", Some("n1"), 31005),
        ]);
        let claims = Endpoints::from([
            ("a".to_owned(), claimed(Exposure::HostPort, "n1", [31001])),
            ("b".to_owned(), claimed(Exposure::HostPort, "", [31002])),
            ("c".to_owned(), claimed(Exposure::HostPort, "n2", [31003])),
            ("d".to_owned(), claimed(Exposure::HostPort, "n1", [31004])),
        ]);
        assert_eq!(
            agreement(&claims, &cluster),
            Agreement {
                claimed: 4,
                agree: 1,
                told_before_placement: 1,
                differ: 1,
                missing_in_cluster: 1,
                unclaimed_in_cluster: 1,
            }
        );
    }

    #[test]
    fn with_node_ports_the_node_of_a_claim_does_not_matter() {
        assert_eq!(
            claimed(Exposure::NodePort, "n1", [31001]),
            BTreeSet::from([at(None, 31001)])
        );
        assert_eq!(Exposure::parse("HostPort"), Some(Exposure::HostPort));
        assert_eq!(Exposure::parse("ingress"), None);
    }
}
