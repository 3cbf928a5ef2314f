//! Small projections of the cluster objects the plan reads (pure).
//!
//! The plan works on these rather than on full `Pod`/`Service`/`Node` objects so that it is
//! cheap to test at scale and says exactly which fields it depends on.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::cluster::{PodHealth, Scheduling, node_external_ip, pod_health, scheduling_of};
use crate::model::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};

/// What every namespaced object contributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ObjectView {
    pub name: String,
    pub namespace: String,
    /// Carries `app.kubernetes.io/managed-by=stack-provisioner`.
    pub managed: bool,
    /// `metadata.creationTimestamp`; the apiserver always sets it.
    pub created_at: Option<Timestamp>,
    /// `metadata.deletionTimestamp` is set: the object is already on its way out.
    pub terminating: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PodView {
    pub object: ObjectView,
    /// What its status shows: Ready, still starting, failed, ended or refused.
    pub health: PodHealth,
    pub scheduling: Scheduling,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServiceView {
    pub object: ObjectView,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeView {
    pub name: String,
    /// The node's first `ExternalIP`.
    pub external_ip: Option<String>,
}

impl ObjectView {
    pub(crate) fn of(meta: &ObjectMeta) -> Self {
        let managed = meta
            .labels
            .as_ref()
            .and_then(|l| l.get(MANAGED_BY_LABEL))
            .is_some_and(|v| v == MANAGED_BY_VALUE);
        Self {
            name: meta.name.clone().unwrap_or_default(),
            namespace: meta.namespace.clone().unwrap_or_default(),
            managed,
            created_at: meta.creation_timestamp.as_ref().map(|t| t.0),
            terminating: meta.deletion_timestamp.is_some(),
        }
    }

    /// Labelled ours and in `namespace`: an object the provisioner may act on.
    pub(crate) fn is_ours_in(&self, namespace: &str) -> bool {
        self.managed && self.namespace == namespace
    }
}

impl PodView {
    pub(crate) fn of(pod: &Pod) -> Self {
        Self {
            object: ObjectView::of(&pod.metadata),
            health: pod_health(pod),
            scheduling: scheduling_of(pod),
        }
    }
}

impl ServiceView {
    pub(crate) fn of(service: &Service) -> Self {
        Self {
            object: ObjectView::of(&service.metadata),
        }
    }
}

impl NodeView {
    /// `None` for a node without a name (never returned by the apiserver).
    pub(crate) fn of(node: &Node) -> Option<Self> {
        Some(Self {
            name: node.metadata.name.clone()?,
            external_ip: node_external_ip(node),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use std::collections::BTreeMap;

    fn meta(labels: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            name: Some("stack-0123456789abcdef".into()),
            namespace: Some("stacks".into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            creation_timestamp: Some(Time(Timestamp::UNIX_EPOCH)),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn only_the_exact_managed_by_label_counts_as_ours() {
        assert!(ObjectView::of(&meta(&[(MANAGED_BY_LABEL, MANAGED_BY_VALUE)])).managed);
        assert!(!ObjectView::of(&meta(&[(MANAGED_BY_LABEL, "helm")])).managed);
        assert!(!ObjectView::of(&meta(&[("app", MANAGED_BY_VALUE)])).managed);
        assert!(!ObjectView::of(&ObjectMeta::default()).managed);
    }

    #[test]
    fn pod_projection_keeps_health_schedule_age_and_deletion() {
        let mut m = meta(&[(MANAGED_BY_LABEL, MANAGED_BY_VALUE)]);
        m.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        let pod = Pod {
            metadata: m,
            spec: Some(PodSpec {
                node_name: Some("n1".into()),
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: Some("Succeeded".into()),
                ..PodStatus::default()
            }),
        };
        let view = PodView::of(&pod);
        assert_eq!(view.health, PodHealth::Succeeded);
        assert_eq!(view.scheduling, Scheduling::Scheduled("n1".into()));
        assert_eq!(view.object.created_at, Some(Timestamp::UNIX_EPOCH));
        assert_eq!(view.object.namespace, "stacks");
        assert!(view.object.terminating);
    }

    #[test]
    fn node_projection_takes_the_first_external_ip() {
        let node = Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                ..ObjectMeta::default()
            },
            status: Some(NodeStatus {
                addresses: Some(vec![
                    NodeAddress {
                        type_: "InternalIP".into(),
                        address: "10.0.0.1".into(),
                    },
                    NodeAddress {
                        type_: "ExternalIP".into(),
                        address: "203.0.113.9".into(),
                    },
                ]),
                ..NodeStatus::default()
            }),
            ..Node::default()
        };
        assert_eq!(
            NodeView::of(&node),
            Some(NodeView {
                name: "n1".into(),
                external_ip: Some("203.0.113.9".into())
            })
        );
        assert_eq!(NodeView::of(&Node::default()), None);
    }
}
