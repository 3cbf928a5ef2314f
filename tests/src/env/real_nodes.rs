//! Real nodes (`tests/env/nodes.sh`): kubelets on containerd with runc and gVisor, each in a network
//! namespace of its own, labelled `role=stack`. Stacks created in the environment run there.
//!
//! The kubelets run with `--cloud-provider=external`, as EKS's do, so a node waits for a
//! cloud controller to give it addresses and lift its `uninitialized` taint; [`init`] plays
//! that controller: the node's one address becomes its InternalIP and its ExternalIP (the
//! address the API hands participants).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerPort, Node, Pod, ResourceRequirements};
use k8s_openapi::api::node::v1::{Overhead, RuntimeClass};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::nodes::{ROLE_LABEL, patch_node_spec, probe_pod, run_probe_pod, wait_node_ready};
use super::wait::wait_for;
use super::{EnvError, EnvSettings};

/// The role of the real nodes, the provisioner's default `STACK_NODE_ROLE`.
pub const STACK_ROLE: &str = "stack";
/// Every real node carries this label (kwok's nodes do not).
pub const REAL_NODE_LABEL: (&str, &str) = ("stack-env/node", "real");

/// gVisor's RuntimeClass on the real nodes (handler `runsc` in their containerd), made by
/// [`init`] as an operator makes it beside the runtime: `STACK_RUNTIME_CLASS=gvisor` runs every
/// stack in gVisor's sandbox.
pub const GVISOR_RUNTIME_CLASS: &str = "gvisor";
const GVISOR_HANDLER: &str = "runsc";
/// What a gVisor sandbox needs beside its containers, added to every such pod's requests and
/// to its cgroup's limits (the RuntimeClass's `overhead`): the Sentry and the gofer run in the
/// pod's cgroup. Idle, the `tcp` challenge's sandbox holds ~22 MiB; without this its 32Mi
/// limit killed it (OOMKilled) as soon as its shell forked a few probes.
const GVISOR_OVERHEAD: [(&str, &str); 2] = [("cpu", "50m"), ("memory", "32Mi")];

const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// Where a kubelet with an external cloud provider puts its `--node-ip`.
const PROVIDED_IP_ANNOTATION: &str = "alpha.kubernetes.io/provided-node-ip";
const REGISTER_TIMEOUT: Duration = Duration::from_secs(90);

/// The name of real node `index` (1-based), as `nodes.sh` starts it.
pub fn node_name(index: usize) -> String {
    format!("stack-node-{index}")
}

/// The challenge image `name` (`tcp`, `http`, `lowport`, `crash`: `tests/env/images/README.md`)
/// in the environment's registry.
pub fn image(registry: &str, name: &str) -> String {
    format!("{registry}/stack-env/{name}:1")
}

/// The address participants connect from here: the host end of the nodes' bridge, where the
/// registry listens. It is private, so an API whose stacks run on the real nodes lets it in
/// (`STACK_ALLOW_INGRESS_CIDRS`) as an operator lets in an on-site network.
pub fn participant_cidr(registry: &str) -> String {
    format!("{}/32", registry_host(registry))
}

/// The host of the registry's `host:port`: the bridge's host end, a private address of this
/// machine (a host of the "VPC" to a stack).
pub fn registry_host(registry: &str) -> &str {
    registry.rsplit_once(':').map_or(registry, |(host, _)| host)
}

/// What an API whose stacks run on the real nodes is configured with, as an operator would:
/// stacks on the `role=stack` nodes, images of the local registry let through as a private
/// registry is, participants' network let in, and the isolation check.
pub fn api_settings(registry: &str) -> Vec<(&'static str, String)> {
    vec![
        ("STACK_NODE_ROLE", STACK_ROLE.to_owned()),
        ("STACK_IMAGE_ALLOWLIST", format!("{registry}/")),
        ("STACK_ALLOW_INGRESS_CIDRS", participant_cidr(registry)),
        ("STACK_ISOLATION_CHECK_IMAGE", isolation_check_image(registry)),
        ("STACK_PREPULL_HELPER_IMAGE", image(registry, "busybox")),
    ]
}

/// The real nodes' share of this test process: every harness on them holds a shared guard; a
/// test that disturbs them all (stops their NetworkPolicy enforcer) holds them alone, after the
/// others finish and before any other starts.
#[derive(Debug)]
pub enum NodesGuard {
    Shared(tokio::sync::RwLockReadGuard<'static, ()>),
    Alone(tokio::sync::RwLockWriteGuard<'static, ()>),
}

static NODES: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

impl NodesGuard {
    pub async fn shared() -> Self {
        NodesGuard::Shared(NODES.read().await)
    }

    pub async fn alone() -> Self {
        NodesGuard::Alone(NODES.write().await)
    }
}

/// The image of the stacks' isolation check here: the `tcp` image, whose busybox has `sh` and
/// `nc`, as an operator's `STACK_ISOLATION_CHECK_IMAGE` would.
pub fn isolation_check_image(registry: &str) -> String {
    image(registry, "tcp")
}

/// The last `count` policy syncs of node `index`'s NetworkPolicy enforcer, from its log (when
/// it last programmed its rules and how long that took), for a failure message; empty if the
/// log cannot be read.
pub fn enforcer_syncs(settings: &EnvSettings, index: usize, count: usize) -> Vec<String> {
    let Some(dir) = &settings.state_dir else {
        return Vec::new();
    };
    let log = dir.join("logs").join(format!("{}-kube-router.log", node_name(index)));
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let syncs: Vec<String> = text
        .lines()
        .filter(|line| line.contains("Starting sync of iptables") || line.contains("sync iptables took"))
        .map(str::to_owned)
        .collect();
    syncs[syncs.len().saturating_sub(count)..].to_vec()
}

/// Initializes the real nodes 1..=`count` as a cloud controller would, waits until each is
/// Ready, makes gVisor's RuntimeClass and runs a pod on each node under each runtime (the
/// sandbox and the TCP challenge image pulled, the pod network up), so that `up` returns with
/// nodes that really run stacks.
pub async fn init(client: &Client, count: usize, registry: &str) -> Result<Vec<Node>, EnvError> {
    let names: Vec<String> = (1..=count).map(node_name).collect();
    let nodes = futures::future::try_join_all(names.iter().map(|name| initialize(client, name))).await?;
    create_gvisor_runtime_class(client).await?;
    let probes = names
        .iter()
        .flat_map(|name| [None, Some(GVISOR_RUNTIME_CLASS)].map(|class| run_probe(client, name, registry, class)));
    futures::future::try_join_all(probes).await?;
    Ok(nodes)
}

async fn create_gvisor_runtime_class(client: &Client) -> Result<(), EnvError> {
    let class = RuntimeClass {
        metadata: ObjectMeta {
            name: Some(GVISOR_RUNTIME_CLASS.to_owned()),
            ..ObjectMeta::default()
        },
        handler: GVISOR_HANDLER.to_owned(),
        overhead: Some(Overhead {
            pod_fixed: Some(
                GVISOR_OVERHEAD
                    .iter()
                    .map(|(name, amount)| ((*name).to_owned(), Quantity((*amount).to_owned())))
                    .collect(),
            ),
        }),
        ..RuntimeClass::default()
    };
    match Api::<RuntimeClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
    {
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        created => created
            .map(drop)
            .map_err(EnvError::kube(format!("create RuntimeClass {GVISOR_RUNTIME_CLASS}"))),
    }
}

/// Initializes a node that joined at runtime (`tests/env/add-node`) as [`init`] does, without
/// running a pod on it: it may carry a startup taint that only the provisioner lifts.
pub async fn init_joining(client: &Client, name: &str) -> Result<Node, EnvError> {
    initialize(client, name).await
}

async fn initialize(client: &Client, name: &str) -> Result<Node, EnvError> {
    let nodes = Api::<Node>::all(client.clone());
    let registered = |node: Option<&Node>| node.is_some_and(|n| n.annotations().contains_key(PROVIDED_IP_ANNOTATION));
    let node = wait_for(
        &nodes,
        name,
        &format!("kubelet of {name} to register"),
        REGISTER_TIMEOUT,
        registered,
    )
    .await?
    .ok_or_else(|| EnvError::NotConfigured(format!("node {name} vanished while registering")))?;
    let ip = node.annotations()[PROVIDED_IP_ANNOTATION].clone();
    let addresses = json!({ "status": { "addresses": [
        { "type": "InternalIP", "address": ip },
        { "type": "ExternalIP", "address": ip },
        { "type": "Hostname", "address": name },
    ]}});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&addresses))
        .await
        .map_err(EnvError::kube(format!("set addresses of node {name}")))?;
    let taints: Vec<_> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key != UNINITIALIZED_TAINT)
        .collect();
    let change = format!("lift the uninitialized taint of node {name}");
    patch_node_spec(client, name, json!({ "taints": taints }), change).await?;
    wait_node_ready(client, name).await
}

/// A pod of the TCP challenge on `node` under `runtime_class` (the node's default, runc, when
/// none), waited until Ready, then deleted.
async fn run_probe(client: &Client, node: &str, registry: &str, runtime_class: Option<&str>) -> Result<(), EnvError> {
    let limits = BTreeMap::from([
        ("cpu".to_owned(), Quantity("50m".to_owned())),
        ("memory".to_owned(), Quantity("32Mi".to_owned())),
    ]);
    let name = match runtime_class {
        Some(class) => format!("probe-{node}-{class}"),
        None => format!("probe-{node}"),
    };
    let mut probe = probe_pod(&name, &image(registry, "tcp"));
    let spec = probe.spec.get_or_insert_default();
    spec.runtime_class_name = runtime_class.map(str::to_owned);
    spec.node_selector = Some(BTreeMap::from([
        ("kubernetes.io/hostname".to_owned(), node.to_owned()),
        (ROLE_LABEL.to_owned(), STACK_ROLE.to_owned()),
    ]));
    spec.automount_service_account_token = Some(false);
    spec.termination_grace_period_seconds = Some(0);
    let container = &mut spec.containers[0];
    container.ports = Some(vec![ContainerPort {
        container_port: 8080,
        ..ContainerPort::default()
    }]);
    container.resources = Some(ResourceRequirements {
        limits: Some(limits),
        ..ResourceRequirements::default()
    });
    let what = format!("a pod to run on {node} under {}", runtime_class.unwrap_or("runc"));
    run_probe_pod(client, &probe, &what, is_pod_ready).await
}

/// Whether the pod's Ready condition is True.
pub fn is_pod_ready(pod: Option<&Pod>) -> bool {
    pod.and_then(|p| p.status.as_ref())
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
