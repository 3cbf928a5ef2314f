//! The Service object of a stack.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ContainerPort, Pod, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::ClusterError;
use crate::model::{HOST_PORTS_ANNOTATION, MANAGED_BY_LABEL, MANAGED_BY_VALUE, PortMapping, STACK_ID_LABEL, StackId};

/// The NodePort service exposing `ports` of the stack's pod. It is owned by the pod so that
/// the garbage collector removes it with the pod even if every other cleanup fails.
/// `externalTrafficPolicy: Local` keeps the participant's source address and answers only on
/// the pod's node, whose address is the one we hand out.
pub(crate) fn stack_service(
    id: &StackId,
    namespace: &str,
    ports: &[PortMapping],
    pod: &Pod,
) -> Result<Service, ClusterError> {
    let uid = pod
        .metadata
        .uid
        .clone()
        .ok_or(ClusterError::Incomplete("created pod has no uid"))?;
    let labels = BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
        (STACK_ID_LABEL.to_owned(), id.to_string()),
    ]);
    Ok(Service {
        metadata: ObjectMeta {
            name: Some(id.service_name()),
            namespace: Some(namespace.to_owned()),
            labels: Some(labels),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: id.pod_name(),
                uid,
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("NodePort".into()),
            external_traffic_policy: Some("Local".into()),
            selector: Some(BTreeMap::from([(STACK_ID_LABEL.to_owned(), id.to_string())])),
            ports: Some(
                ports
                    .iter()
                    .enumerate()
                    .map(|(i, p)| ServicePort {
                        name: Some(format!("p{i}-{}", p.protocol.as_str().to_ascii_lowercase())),
                        protocol: Some(p.protocol.as_str().to_owned()),
                        port: i32::from(p.container_port),
                        target_port: Some(IntOrString::Int(i32::from(p.container_port))),
                        node_port: Some(i32::from(p.node_port)),
                        ..ServicePort::default()
                    })
                    .collect(),
            ),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

/// `pod` with each of `ports` bound to its host port: on the first container port declaring
/// it (the validator made sure one does), and listed in [`HOST_PORTS_ANNOTATION`].
pub(crate) fn with_host_ports(pod: &Pod, ports: &[PortMapping]) -> Pod {
    let mut pod = pod.clone();
    let containers = pod.spec.iter_mut().flat_map(|s| s.containers.iter_mut());
    let mut declared: Vec<&mut ContainerPort> = containers.flat_map(|c| c.ports.iter_mut().flatten()).collect();
    for mapping in ports {
        let target = declared.iter_mut().find(|p| {
            p.container_port == i32::from(mapping.container_port)
                && p.protocol.as_deref().unwrap_or("TCP") == mapping.protocol.as_str()
                && p.host_port.is_none()
        });
        if let Some(port) = target {
            port.host_port = Some(i32::from(mapping.node_port));
        }
    }
    let listed: Vec<String> = ports.iter().map(|p| p.node_port.to_string()).collect();
    pod.metadata
        .annotations
        .get_or_insert_default()
        .insert(HOST_PORTS_ANNOTATION.to_owned(), listed.join(","));
    pod
}

/// Host ports a pod's [`HOST_PORTS_ANNOTATION`] lists, from its annotations.
pub(crate) fn host_ports_in(annotations: &BTreeMap<String, String>) -> Vec<u16> {
    annotations
        .get(HOST_PORTS_ANNOTATION)
        .map(|listed| listed.split(',').filter_map(|p| p.trim().parse().ok()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Container, PodSpec};

    use super::*;
    use crate::model::Protocol;

    fn port(container_port: i32, protocol: Option<&str>) -> ContainerPort {
        ContainerPort {
            container_port,
            protocol: protocol.map(Into::into),
            ..ContainerPort::default()
        }
    }

    #[test]
    fn host_ports_go_on_the_declared_ports_and_into_the_annotation() {
        let pod = Pod {
            spec: Some(PodSpec {
                containers: vec![
                    Container {
                        name: "web".into(),
                        ports: Some(vec![port(80, None), port(9000, None)]),
                        ..Container::default()
                    },
                    Container {
                        name: "dns".into(),
                        ports: Some(vec![port(53, Some("UDP")), port(80, None)]),
                        ..Container::default()
                    },
                ],
                ..PodSpec::default()
            }),
            ..Pod::default()
        };
        let mapping = |container_port, protocol, node_port| PortMapping {
            container_port,
            protocol,
            node_port,
        };
        let bound = with_host_ports(
            &pod,
            &[mapping(53, Protocol::Udp, 31001), mapping(80, Protocol::Tcp, 31002)],
        );
        let spec = bound.spec.as_ref().unwrap();
        let host = |c: usize, p: usize| spec.containers[c].ports.as_ref().unwrap()[p].host_port;
        assert_eq!(host(0, 0), Some(31002));
        assert_eq!(
            (host(0, 1), host(1, 1)),
            (None, None),
            "only the first declaration is bound"
        );
        assert_eq!(host(1, 0), Some(31001));
        assert_eq!(
            host_ports_in(&bound.metadata.annotations.unwrap_or_default()),
            [31001, 31002]
        );
        assert!(host_ports_in(&pod.metadata.annotations.unwrap_or_default()).is_empty());
    }
}
