//! The Service object of a stack.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::ClusterError;
use crate::model::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, PortMapping, STACK_ID_LABEL, StackId};

/// The NodePort service exposing `ports` of the stack's pod. It is owned by the pod so that
/// the garbage collector removes it with the pod even if every other cleanup fails.
/// `externalTrafficPolicy: Local` keeps the participant's source address and answers only on
/// the pod's node, whose address is the one we hand out.
pub fn stack_service(id: &StackId, namespace: &str, ports: &[PortMapping], pod: &Pod) -> Result<Service, ClusterError> {
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

/// Node ports a service holds.
pub(crate) fn node_ports_of(service: &Service) -> Vec<u16> {
    service
        .spec
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .filter_map(|p| p.node_port.and_then(|n| u16::try_from(n).ok()))
        .collect()
}
