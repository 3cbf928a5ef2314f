//! Simulated nodes: Node objects that kwok keeps Ready and whose pods it runs without containers.
//!
//! Nodes are cluster-wide: a test that adds a node with `role=stack` offers it to every test's
//! pods. Tests needing their own capacity should select it with a label of their own.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Node, NodeAddress, NodeSpec, NodeStatus, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::EnvError;
use super::cluster::wait_default_service_account;
use super::wait::wait_for;

/// kwok manages exactly the nodes with this annotation (see `tests/env/up`).
pub const KWOK_NODE_ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");
/// The label the provisioner schedules stacks with (`STACK_NODE_ROLE`, default `stack`).
pub const ROLE_LABEL: &str = "role";
/// The role of the simulated nodes `up` creates. `role=stack` belongs to the real nodes
/// (`real_nodes`); a test or benchmark that wants kwok's speed and size sets
/// `STACK_NODE_ROLE` to this role, or to one of its own nodes.
pub const SIMULATED_ROLE: &str = "sim";

/// How long a node may take to become Ready, to show a cordon's taint, or to run a probe pod.
const NODE_WAIT: Duration = Duration::from_secs(90);

const EPHEMERAL_STORAGE: &str = "4Ti";

/// The shape of a simulated node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimulatedNode {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// 192.0.2.0/24 (TEST-NET-1) by default: data only, never contacted.
    pub internal_ip: String,
    /// Use 203.0.113.0/24 (TEST-NET-3): data only, never contacted.
    pub external_ip: Option<String>,
    pub cpu: String,
    pub memory: String,
    pub pods: String,
}

impl SimulatedNode {
    /// A node with 64 CPUs, 256Gi, 4Ti of ephemeral storage and 1000 pods (room for the
    /// benchmarks' hundreds of stacks, each limited to 1Gi ephemeral storage), no role and no
    /// external address.
    pub fn new(name: &str) -> Self {
        let host = 1 + name
            .bytes()
            .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)))
            % 254;
        Self {
            name: name.to_owned(),
            labels: BTreeMap::new(),
            internal_ip: format!("192.0.2.{host}"),
            external_ip: None,
            cpu: "64".to_owned(),
            memory: "256Gi".to_owned(),
            pods: "1000".to_owned(),
        }
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_owned(), value.to_owned());
        self
    }

    pub fn role(self, role: &str) -> Self {
        self.label(ROLE_LABEL, role)
    }

    pub fn external_ip(mut self, ip: &str) -> Self {
        self.external_ip = Some(ip.to_owned());
        self
    }

    pub fn allocatable(mut self, cpu: &str, memory: &str, pods: &str) -> Self {
        (self.cpu, self.memory, self.pods) = (cpu.to_owned(), memory.to_owned(), pods.to_owned());
        self
    }

    /// The Node object, status included (the apiserver keeps a node's status on create).
    pub fn to_node(&self) -> Node {
        let mut labels = self.labels.clone();
        for (key, value) in [
            ("kubernetes.io/hostname", self.name.as_str()),
            ("kubernetes.io/os", "linux"),
            ("kubernetes.io/arch", "amd64"),
            ("type", "kwok"),
        ] {
            labels.entry(key.to_owned()).or_insert_with(|| value.to_owned());
        }
        let storage = EPHEMERAL_STORAGE.to_owned();
        let resources: BTreeMap<String, Quantity> = [
            ("cpu", &self.cpu),
            ("memory", &self.memory),
            ("pods", &self.pods),
            ("ephemeral-storage", &storage),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Quantity(v.clone())))
        .collect();
        Node {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some(labels),
                annotations: Some(BTreeMap::from([(
                    KWOK_NODE_ANNOTATION.0.to_owned(),
                    KWOK_NODE_ANNOTATION.1.to_owned(),
                )])),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus {
                addresses: Some(self.addresses()),
                allocatable: Some(resources.clone()),
                capacity: Some(resources),
                ..NodeStatus::default()
            }),
        }
    }

    fn addresses(&self) -> Vec<NodeAddress> {
        let mut addresses = vec![NodeAddress {
            type_: "InternalIP".to_owned(),
            address: self.internal_ip.clone(),
        }];
        if let Some(ip) = &self.external_ip {
            addresses.push(NodeAddress {
                type_: "ExternalIP".to_owned(),
                address: ip.clone(),
            });
        }
        addresses.push(NodeAddress {
            type_: "Hostname".to_owned(),
            address: self.name.clone(),
        });
        addresses
    }
}

/// The simulated nodes `up` creates: two of [`SIMULATED_ROLE`] with external addresses and
/// one without a role.
pub fn default_nodes() -> Vec<SimulatedNode> {
    vec![
        SimulatedNode::new("sim-node-1")
            .role(SIMULATED_ROLE)
            .external_ip("203.0.113.11"),
        SimulatedNode::new("sim-node-2")
            .role(SIMULATED_ROLE)
            .external_ip("203.0.113.12"),
        SimulatedNode::new("system-node-1").label("node-pool", "system"),
    ]
}

/// Creates the node (unless one with that name exists), makes sure its status carries the
/// addresses and capacity we asked for, and waits until kwok reports it Ready.
pub async fn add_node(client: &Client, node: &SimulatedNode) -> Result<Node, EnvError> {
    let nodes = Api::<Node>::all(client.clone());
    let wanted = node.to_node();
    match nodes.create(&PostParams::default(), &wanted).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => return Err(EnvError::kube(format!("create node {}", node.name))(error)),
    }
    // A node that existed already, or a status dropped on create, is corrected through the
    // status subresource; kwok keeps addresses and capacity it finds there.
    let status = json!({ "status": {
        "addresses": wanted.status.as_ref().and_then(|s| s.addresses.clone()),
        "allocatable": wanted.status.as_ref().and_then(|s| s.allocatable.clone()),
        "capacity": wanted.status.as_ref().and_then(|s| s.capacity.clone()),
    }});
    nodes
        .patch_status(&node.name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map_err(EnvError::kube(format!("patch status of node {}", node.name)))?;
    wait_node_ready(client, &node.name).await
}

/// Waits until the node's Ready condition is True.
pub async fn wait_node_ready(client: &Client, name: &str) -> Result<Node, EnvError> {
    let nodes = Api::<Node>::all(client.clone());
    let ready = wait_for(&nodes, name, &format!("node {name} Ready"), NODE_WAIT, is_node_ready).await?;
    ready.ok_or_else(|| EnvError::Timeout {
        what: format!("node {name} (deleted while waiting)"),
        seconds: 0,
    })
}

/// Whether the node's Ready condition is True.
pub fn is_node_ready(node: Option<&Node>) -> bool {
    node.and_then(|n| n.status.as_ref())
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Marks the node unschedulable, as `kubectl cordon` does.
pub async fn cordon(client: &Client, name: &str) -> Result<(), EnvError> {
    set_unschedulable(client, name, true).await
}

pub async fn uncordon(client: &Client, name: &str) -> Result<(), EnvError> {
    set_unschedulable(client, name, false).await
}

/// The taint the node lifecycle controller puts on a cordoned node.
const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

/// Returns once the controller-manager has tainted (or untainted) the node: it has watched the
/// change by then, and so, in practice, has the scheduler, which watches nodes the same way.
/// After the patch alone, a pod could still meet a scheduler cache without the change (a CI
/// run waited 60 s in vain for a pod created right after a cordon to be unschedulable).
async fn set_unschedulable(client: &Client, name: &str, unschedulable: bool) -> Result<(), EnvError> {
    let change = format!("set node {name} unschedulable={unschedulable}");
    patch_node_spec(client, name, json!({ "unschedulable": unschedulable }), change).await?;
    let nodes = Api::<Node>::all(client.clone());
    let tainted = move |node: Option<&Node>| {
        let taints = node.and_then(|n| n.spec.as_ref()?.taints.as_ref());
        taints.is_some_and(|t| t.iter().any(|t| t.key == UNSCHEDULABLE_TAINT)) == unschedulable
    };
    let what = format!("node {name} tainted {UNSCHEDULABLE_TAINT}={unschedulable}");
    wait_for(&nodes, name, &what, NODE_WAIT, tainted).await.map(|_| ())
}

/// Merges `spec` into the node's spec; `change` names it in an error.
pub async fn patch_node_spec(
    client: &Client,
    name: &str,
    spec: serde_json::Value,
    change: String,
) -> Result<(), EnvError> {
    Api::<Node>::all(client.clone())
        .patch(name, &PatchParams::default(), &Patch::Merge(json!({ "spec": spec })))
        .await
        .map_err(EnvError::kube(change))?;
    Ok(())
}

/// Deletes the node; a node that is already gone is not an error.
pub async fn delete_node(client: &Client, name: &str) -> Result<(), EnvError> {
    match Api::<Node>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(EnvError::kube(format!("delete node {name}"))(error)),
    }
}

/// Waits until a pod selecting `role` nodes is actually placed: a Ready node can still carry
/// the not-ready taint for a moment, and `up` must not return before stacks can be scheduled.
pub async fn wait_schedulable(client: &Client, role: &str) -> Result<(), EnvError> {
    let mut probe = probe_pod(&format!("schedulable-probe-{role}"), "probe");
    probe.spec.get_or_insert_default().node_selector = Some(BTreeMap::from([(ROLE_LABEL.to_owned(), role.to_owned())]));
    // Right after `up` starts the controller manager, `default` may still lack its account.
    wait_default_service_account(client, "default").await?;
    let scheduled = |pod: Option<&Pod>| {
        pod.and_then(|p| p.spec.as_ref())
            .is_some_and(|spec| spec.node_name.is_some())
    };
    run_probe_pod(client, &probe, &format!("a {role} pod to be scheduled"), scheduled).await
}

/// A pod `name` of one container `probe` running `image`, to which a probe adds what it checks.
pub fn probe_pod(name: &str, image: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "probe".to_owned(),
                image: Some(image.to_owned()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

/// Creates `probe` in `default` (or takes the one already there), waits until `condition` holds
/// for it (`what`), and deletes it however the wait ended.
pub async fn run_probe_pod(
    client: &Client,
    probe: &k8s_openapi::api::core::v1::Pod,
    what: &str,
    condition: impl kube::runtime::wait::Condition<k8s_openapi::api::core::v1::Pod>,
) -> Result<(), EnvError> {
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), "default");
    let name = probe.metadata.name.clone().unwrap_or_default();
    match pods.create(&PostParams::default(), probe).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => return Err(EnvError::kube(format!("create pod {name}"))(error)),
    }
    let waited = wait_for(&pods, &name, what, NODE_WAIT, condition).await;
    pods.delete(&name, &DeleteParams::default().grace_period(0))
        .await
        .map_err(EnvError::kube(format!("delete pod {name}")))?;
    waited.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stack_node_carries_role_external_ip_and_the_kwok_annotation() {
        let node = SimulatedNode::new("n1")
            .role("stack")
            .external_ip("203.0.113.7")
            .to_node();
        let labels = node.metadata.labels.unwrap_or_default();
        assert_eq!(labels.get("role").map(String::as_str), Some("stack"));
        let annotations = node.metadata.annotations.unwrap_or_default();
        assert_eq!(annotations.get("kwok.x-k8s.io/node").map(String::as_str), Some("fake"));
        let status = node.status.unwrap_or_default();
        let external: Vec<_> = status
            .addresses
            .unwrap_or_default()
            .into_iter()
            .filter(|a| a.type_ == "ExternalIP")
            .map(|a| a.address)
            .collect();
        assert_eq!(external, ["203.0.113.7"]);
        assert_eq!(
            status.allocatable.unwrap_or_default().get("cpu"),
            Some(&Quantity("64".to_owned()))
        );
    }

    #[test]
    fn default_nodes_are_two_simulated_stack_nodes_and_one_other() {
        let roles: Vec<_> = default_nodes()
            .iter()
            .map(|n| n.labels.get(ROLE_LABEL).cloned())
            .collect();
        let sim = Some(SIMULATED_ROLE.to_owned());
        assert_eq!(roles, [sim.clone(), sim, None]);
    }
}
