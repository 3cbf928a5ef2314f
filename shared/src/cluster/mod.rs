//! Kubernetes access: the stack's pod and NodePort service, the namespace's guard rails,
//! node addresses and label-selected listings. The client is built in one place
//! ([`connect`]) and shared.

mod client;
mod error;
mod health;
mod isolation;
mod namespace;
mod node_addresses;
mod node_images;
mod node_port_holders;
mod nodeports;
mod objects;
mod placement;
mod pod_metadata;
mod pod_watch;
mod prepull_objects;
mod runtime_class;
mod stack_nodes;
mod timed_view;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client, ResourceExt};

pub(crate) use client::connect;
pub use client::{apply_client_limits, client_builder};
pub use error::ClusterError;
pub(crate) use error::ProtobufError;
#[cfg(test)]
pub(crate) use health::kubelet;
pub(crate) use health::{ImagePull, PodHealth, Rejection, image_pull, pod_health};
pub(crate) use namespace::{IsolationReport, NamespacePolicy};
pub(crate) use node_images::{holds_image, image_names, pod_images};
pub(crate) use node_port_holders::NodePortHolders;
pub(crate) use objects::{stack_service, with_host_ports};
pub use placement::node_external_ip;
pub(crate) use placement::{
    Scheduling, has_role, has_startup_taint, is_port_conflict, is_ready, is_schedulable_stack_node, is_stack_node_up,
    scheduling_of,
};
pub(crate) use prepull_objects::{PREPULL_NAME, PrepullObjects};
pub(crate) use stack_nodes::{STACK_NODES_TTL, StackNode};

use crate::late_writes::{Writes, to_completion};
use crate::model::{Exposure, MANAGED_BY_LABEL, MANAGED_BY_VALUE, PortMapping, STACK_ID_LABEL, StackId, TargetPort};
use node_addresses::NodeAddresses;
pub(crate) use nodeports::PORT_VIEW_MAX_AGE;
use nodeports::{PortPicker, PortUse};
use stack_nodes::stack_nodes_of;
use timed_view::TimedView;

/// Grace period of a stack pod's deletion. Stack pods hold no state, so not the pod's own (up
/// to 30 s); but not zero either: a pod deleted without grace leaves the apiserver at once
/// while its kubelet is still tearing it down, and its host port's forwarding rule outlives it
/// by a second or two; a new stack given the port meanwhile (by the scheduler or by a
/// function) would be announced `running` while its port still led to the old pod. With a
/// grace period the pod object stays, holding its ports for every picker, until the kubelet
/// has stopped its sandbox, and only then is removed.
const POD_DELETE_GRACE_SECONDS: u32 = 1;
/// How a pod is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PodDeletion {
    /// With [`POD_DELETE_GRACE_SECONDS`]: the object stays until its kubelet has stopped it.
    Graceful,
    /// At once: its node is gone, no kubelet will ever stop it.
    Now,
}

impl PodDeletion {
    fn params(self) -> DeleteParams {
        let grace = match self {
            PodDeletion::Graceful => POD_DELETE_GRACE_SECONDS,
            PodDeletion::Now => 0,
        };
        DeleteParams::background().grace_period(grace)
    }
}

/// How many times a service create is retried when the apiserver says a port is taken.
const NODEPORT_ATTEMPTS: usize = 8;
/// Objects per list call. 5,000 stacks take a dozen calls; the reconciler holds one page of
/// full pods and one of services at a time: its peak RSS over 5,000 stacks is ~70 MiB at
/// 1,000 per page and ~110 MiB at 2,000 (`bench-reconciler`), against a 128 MB budget.
const LIST_PAGE: u32 = 1000;
/// Stack ids per `stack-id in (...)` selector: ~25 URL bytes each, so a list call's request
/// line stays near 6 KB, under the 8 KB that proxies commonly accept.
const IDS_PER_SELECTOR: usize = 250;

/// Where stacks' ports come from and how many there may be: the create's picker and `/stats`
/// read the same settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortPolicy {
    pub exposure: Exposure,
    /// `STACK_NODEPORT_MIN..=STACK_NODEPORT_MAX`.
    pub range: (u16, u16),
    /// `STACK_NODE_ROLE`: in hostport mode each of these nodes offers the whole range.
    pub node_role: String,
}

impl PortPolicy {
    pub fn of(config: &crate::config::Config) -> Self {
        Self {
            exposure: config.exposure,
            range: (config.nodeport_min, config.nodeport_max),
            node_role: config.validation.node_role.clone(),
        }
    }
}

/// Cluster access for one stack namespace; built once per process.
pub struct Cluster {
    client: Client,
    namespace: String,
    pods: Api<Pod>,
    services: Api<Service>,
    /// Every namespace's services: their node ports are closed to stacks.
    all_services: Api<Service>,
    node_port_holders: TimedView<NodePortHolders>,
    nodes: Api<Node>,
    guard: namespace::NamespaceGuard,
    port_policy: PortPolicy,
    ports: PortPicker,
    /// One port-view refresh at a time: concurrent creates share it (at 8,000 stacks, 32
    /// creates each listing every pod at once stalled creates past their deadline).
    port_refresh: tokio::sync::Mutex<()>,
    node_addresses: NodeAddresses,
    stack_nodes: TimedView<[StackNode]>,
    runtime_overhead: tokio::sync::OnceCell<crate::model::PodOverhead>,
}

impl Cluster {
    pub fn new(client: Client, namespace: &str, policy: NamespacePolicy, port_policy: PortPolicy) -> Self {
        Self {
            pods: Api::namespaced(client.clone(), namespace),
            services: Api::namespaced(client.clone(), namespace),
            all_services: Api::all(client.clone()),
            node_port_holders: TimedView::default(),
            nodes: Api::all(client.clone()),
            guard: namespace::NamespaceGuard::new(client.clone(), namespace, policy, port_policy.exposure),
            ports: PortPicker::new(port_policy.range.0, port_policy.range.1),
            port_refresh: tokio::sync::Mutex::new(()),
            node_addresses: NodeAddresses::default(),
            stack_nodes: TimedView::default(),
            runtime_overhead: tokio::sync::OnceCell::new(),
            port_policy,
            namespace: namespace.to_owned(),
            client,
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub(crate) fn port_policy(&self) -> &PortPolicy {
        &self.port_policy
    }

    /// Proves the apiserver answers and accepts our credentials.
    pub async fn ping(&self) -> Result<(), ClusterError> {
        self.client
            .apiserver_version()
            .await
            .map(|_| ())
            .map_err(|e| ClusterError::from_kube("get version", e))
    }

    /// Ensures the namespace and its guard rails exist, and refuses creation while another
    /// NetworkPolicy widens the isolation (when it is required).
    pub(crate) async fn prepare_namespace(&self) -> Result<(), ClusterError> {
        self.guard.ensure().await
    }

    /// The isolation as last checked (at most a minute old), for `/stats`.
    pub async fn isolation(&self) -> Result<IsolationReport, ClusterError> {
        self.guard.isolation().await
    }

    /// Creates `pod`, one of `creates`: to its answer however long after the caller gave up,
    /// and deleted at once if it landed after that (see [`crate::late_writes`]).
    pub(crate) async fn create_pod(&self, pod: &Pod, creates: &Writes) -> Result<Pod, ClusterError> {
        let (pods, pod) = (self.pods.clone(), pod.clone());
        let create = {
            let pods = pods.clone();
            async move { pods.create(&PostParams::default(), &pod).await }
        };
        let created = creates
            .run(create, move |created| {
                let landed = created.as_ref().ok()?.name_any();
                Some(async move {
                    tracing::info!(pod = landed, "a pod landed after its create gave up, deleting it");
                    if let Err(err) = pods.delete(&landed, &PodDeletion::Now.params()).await {
                        tracing::warn!(error = %err, "could not delete a pod that landed late; the reconciler will");
                    }
                })
            })
            .await
            .map_err(|source| ClusterError::Interrupted {
                operation: "create pod",
                source,
            })?;
        created.map_err(|e| ClusterError::from_kube("create pod", e))
    }

    /// Creates the stack's NodePort service, owned by `pod`, choosing free node ports in the
    /// configured range; the apiserver's allocator has the final word.
    pub(crate) async fn create_service(
        &self,
        id: &StackId,
        targets: &[TargetPort],
        pod: &Pod,
    ) -> Result<Vec<PortMapping>, ClusterError> {
        let mut rejected = HashSet::new();
        let mut refreshed = false;
        for attempt in 0..NODEPORT_ATTEMPTS {
            let mappings = self.pick_ports(targets, &rejected, &mut refreshed).await?;
            let service = stack_service(id, &self.namespace, &mappings, pod)?;
            match self.services.create(&PostParams::default(), &service).await {
                Ok(_) => {
                    self.ports.mark_used(mappings.iter().map(|m| m.node_port));
                    return Ok(mappings);
                }
                Err(err) => match error::taken_node_ports(&err) {
                    Some(taken) if !taken.is_empty() => {
                        tracing::debug!(?taken, attempt, "node ports already allocated, retrying");
                        self.ports.mark_full(taken.iter().copied());
                        rejected.extend(taken);
                    }
                    _ => return Err(ClusterError::from_kube("create service", err)),
                },
            }
        }
        Err(ClusterError::NodePortsExhausted)
    }

    /// Ports of the range for `targets`, least used first, none of `rejected`: from this
    /// process's view, refreshed when stale and (once per create, tracked by `refreshed`)
    /// before declaring the range full.
    pub(crate) async fn pick_ports(
        &self,
        targets: &[TargetPort],
        rejected: &HashSet<u16>,
        refreshed: &mut bool,
    ) -> Result<Vec<PortMapping>, ClusterError> {
        if self.ports.is_stale() {
            self.refresh_port_use_shared().await?;
            *refreshed = true;
        }
        let picked = match self.ports.pick(targets.len(), rejected) {
            Some(picked) => picked,
            None if !*refreshed => {
                // Our view may be old: look again before declaring the range full.
                self.refresh_port_use_shared().await?;
                *refreshed = true;
                self.ports
                    .pick(targets.len(), rejected)
                    .ok_or(ClusterError::NodePortsExhausted)?
            }
            None => return Err(ClusterError::NodePortsExhausted),
        };
        Ok(targets
            .iter()
            .zip(picked)
            .map(|(t, node_port)| PortMapping {
                container_port: t.container_port,
                protocol: t.protocol,
                node_port,
            })
            .collect())
    }

    /// Counts host ports as taken once the pod holding them is created.
    pub(crate) fn mark_host_ports_used(&self, ports: &[PortMapping]) {
        self.ports.mark_used(ports.iter().map(|p| p.node_port));
    }

    /// The scheduler found `ports` taken on every node: not picked again until the next refresh.
    pub(crate) fn mark_ports_full(&self, ports: &[PortMapping]) {
        self.ports.mark_full(ports.iter().map(|p| p.node_port));
    }

    /// Refreshes the port view, unless another create finished a refresh while this one
    /// waited for its turn.
    async fn refresh_port_use_shared(&self) -> Result<(), ClusterError> {
        let asked = Instant::now();
        let _one_at_a_time = self.port_refresh.lock().await;
        if self.ports.refreshed_at().is_some_and(|at| at >= asked) {
            return Ok(());
        }
        self.refresh_port_use().await
    }

    /// What the range's ports hold: the node ports of every Service of the cluster, ours or
    /// not (taken on every node, whatever the mode: kube-proxy forwards a node port ahead of
    /// a pod's host port, so a stack given one would send its participants elsewhere), host
    /// ports of our pods (one node each, read from their annotation in a metadata-only list,
    /// in protobuf: see [`pod_metadata`]) and, in hostport mode, how many nodes offer the range.
    async fn refresh_port_use(&self) -> Result<(), ClusterError> {
        let nodes = async {
            match self.port_policy.exposure {
                Exposure::NodePort => Ok(1),
                Exposure::HostPort => {
                    let read_at = Instant::now();
                    let nodes = self.list_nodes().await?;
                    for node in &nodes {
                        self.node_addresses.remember(node, read_at);
                    }
                    let role = &self.port_policy.node_role;
                    let schedulable = nodes.iter().filter(|n| is_schedulable_stack_node(n, role)).count();
                    Ok(u32::try_from(schedulable).unwrap_or(u32::MAX))
                }
            }
        };
        let managed = managed_selector();
        let holders = self.node_port_holders(Duration::ZERO);
        let pods = paginate(
            &managed,
            |page: ListParams| async move { pod_metadata::list_page(&self.client, &self.namespace, &page).await },
            |meta| objects::host_ports_in(&meta.annotations),
        );
        let (slots, holders, pods) = tokio::try_join!(nodes, holders, pods)?;
        let held = PortUse {
            everywhere: holders.ports().collect(),
            on_one_node: pods.into_iter().flatten().collect(),
        };
        self.ports.replace(&held, slots);
        Ok(())
    }

    /// Which Service holds each node port of the cluster, as read at most `max_age` before
    /// this call (zero: read now, or by a read that finished meanwhile); else read now, one
    /// read at a time for the process. Functions deployed before RBAC granted listing every
    /// namespace's services see the stacks' own only.
    pub(crate) async fn node_port_holders(&self, max_age: Duration) -> Result<Arc<NodePortHolders>, ClusterError> {
        let asked = Instant::now();
        if let Some(holders) = self.node_port_holders.get(max_age, asked) {
            return Ok(holders);
        }
        let _one_at_a_time = self.node_port_holders.refresh.lock().await;
        if let Some(holders) = self.node_port_holders.get(max_age, asked) {
            return Ok(holders);
        }
        let read_at = Instant::now();
        let held = match list_all(&self.all_services, &ListParams::default(), |s| {
            node_port_holders::held_by(&s)
        })
        .await
        {
            Err(err) if err.is_rbac_denial() => {
                tracing::warn!(
                    "the cluster's services cannot be listed: only the stacks' own node ports are kept \
                     from host ports (apply functions/kubernetes-rbac.yaml again)"
                );
                list_all(&self.services, &managed_selector(), |s| node_port_holders::held_by(&s)).await
            }
            listed => listed,
        }?;
        let holders = Arc::new(held.into_iter().flatten().collect());
        Ok(self.node_port_holders.replace(holders, read_at))
    }

    /// Waits, with one watch, until the `created` pod is Ready, or shows that it never will
    /// be (failed, ended, refused by its kubelet), or the scheduler gave up on it, at most
    /// `budget`: the pod then, or as last seen. A pod still starting (pulling, backing off,
    /// started but not ready) is waited for.
    pub(crate) async fn wait_settled(&self, created: Pod, budget: Duration) -> Result<Pod, ClusterError> {
        let settled = |pod: &Pod| {
            matches!(scheduling_of(pod), Scheduling::Unschedulable(_))
                || !matches!(pod_health(pod), PodHealth::Starting(_))
        };
        pod_watch::until(&self.pods, created, budget, settled).await
    }

    /// The node's public address (`ExternalIP`), read once a minute at most per node.
    pub async fn node_public_ip(&self, name: &str) -> Result<Option<String>, ClusterError> {
        if let Some(address) = self.node_addresses.get(name, Instant::now()) {
            return Ok(Some(address));
        }
        let read_at = Instant::now();
        let node = self.get_node(name).await?;
        Ok(node.and_then(|node| self.node_addresses.remember(&node, read_at)))
    }

    pub(crate) async fn get_pod(&self, name: &str) -> Result<Option<Pod>, ClusterError> {
        self.pods
            .get_opt(name)
            .await
            .map_err(|e| ClusterError::from_kube("get pod", e))
    }

    pub(crate) async fn get_service(&self, name: &str) -> Result<Option<Service>, ClusterError> {
        self.services
            .get_opt(name)
            .await
            .map_err(|e| ClusterError::from_kube("get service", e))
    }

    pub(crate) async fn get_node(&self, name: &str) -> Result<Option<Node>, ClusterError> {
        self.nodes
            .get_opt(name)
            .await
            .map_err(|e| ClusterError::from_kube("get node", e))
    }

    pub(crate) async fn delete_service(&self, name: &str) -> Result<(), ClusterError> {
        let (services, name) = (self.services.clone(), name.to_owned());
        run_to_completion("delete service", async move {
            gone("delete service", services.delete(&name, &DeleteParams::default()).await)
        })
        .await
    }

    pub(crate) async fn delete_pod(&self, name: &str, deletion: PodDeletion) -> Result<(), ClusterError> {
        let (pods, name) = (self.pods.clone(), name.to_owned());
        run_to_completion("delete pod", async move {
            gone("delete pod", pods.delete(&name, &deletion.params()).await)
        })
        .await
    }

    /// Forgets ports of deleted services and pods so that they can be picked again at once.
    pub(crate) fn release_node_ports(&self, ports: &[PortMapping]) {
        self.ports.mark_free(ports.iter().map(|p| p.node_port));
    }

    /// The pods of the stacks `ids` (managed-by label and `stack-id in (...)`): one list
    /// call per [`IDS_PER_SELECTOR`] ids, whatever else the namespace holds.
    pub async fn list_pods_of(&self, ids: &[StackId]) -> Result<Vec<Pod>, ClusterError> {
        list_of_stacks(&self.pods, ids).await
    }

    /// The services of the stacks `ids`, as [`Self::list_pods_of`].
    pub async fn list_services_of(&self, ids: &[StackId]) -> Result<Vec<Service>, ClusterError> {
        list_of_stacks(&self.services, ids).await
    }

    /// Every node; the stack nodes among them also refresh [`Self::stack_nodes`].
    pub async fn list_nodes(&self) -> Result<Vec<Node>, ClusterError> {
        let read_at = Instant::now();
        let nodes = list_all(&self.nodes, &ListParams::default(), |node| node).await?;
        self.stack_nodes
            .replace(stack_nodes_of(&nodes, &self.port_policy.node_role), read_at);
        Ok(nodes)
    }

    /// The nodes labelled `role=<STACK_NODE_ROLE>`, whatever their state, as read at most
    /// `max_age` ago; else read now (one label-selected list), one read at a time for all
    /// creates of the process.
    pub async fn stack_nodes(&self, max_age: Duration) -> Result<Arc<[StackNode]>, ClusterError> {
        if let Some(nodes) = self.stack_nodes.get(max_age, Instant::now()) {
            return Ok(nodes);
        }
        let _one_at_a_time = self.stack_nodes.refresh.lock().await;
        // Another create may have read them while this one waited.
        if let Some(nodes) = self.stack_nodes.get(max_age, Instant::now()) {
            return Ok(nodes);
        }
        let role = &self.port_policy.node_role;
        let read_at = Instant::now();
        let nodes = list_all(
            &self.nodes,
            &ListParams::default().labels(&format!("role={role}")),
            |n| n,
        )
        .await?;
        for node in &nodes {
            self.node_addresses.remember(node, read_at);
        }
        Ok(self.stack_nodes.replace(stack_nodes_of(&nodes, role), read_at))
    }

    /// Pods carrying our managed-by label (paginated list calls), keeping only `project(pod)` of
    /// each: at most one page
    /// of full objects is held at a time, which matters with thousands of stacks.
    pub(crate) async fn list_stack_pods_as<T>(&self, project: impl FnMut(Pod) -> T) -> Result<Vec<T>, ClusterError> {
        list_all(&self.pods, &managed_selector(), project).await
    }

    /// Services carrying our managed-by label, keeping only `project(service)` of each.
    pub(crate) async fn list_stack_services_as<T>(
        &self,
        project: impl FnMut(Service) -> T,
    ) -> Result<Vec<T>, ClusterError> {
        list_all(&self.services, &managed_selector(), project).await
    }
}

/// A delete's answer: an object already gone is deleted.
fn gone<T>(operation: &'static str, deleted: Result<T, kube::Error>) -> Result<(), ClusterError> {
    match deleted {
        Ok(_) => Ok(()),
        Err(err) if is_not_found(&err) => Ok(()),
        Err(err) => Err(ClusterError::from_kube(operation, err)),
    }
}

/// A write that a caller giving up does not cut off in flight ([`to_completion`]).
async fn run_to_completion<T: Send + 'static>(
    operation: &'static str,
    write: impl Future<Output = Result<T, ClusterError>> + Send + 'static,
) -> Result<T, ClusterError> {
    to_completion(write)
        .await
        .map_err(|source| ClusterError::Interrupted { operation, source })?
}

fn managed_selector() -> ListParams {
    ListParams::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"))
}

/// `managed-by=...,stack-id in (...)` per [`IDS_PER_SELECTOR`] of `ids` (none for no ids: an
/// empty set is not a selector).
fn stack_selectors(ids: &[StackId]) -> Vec<ListParams> {
    ids.chunks(IDS_PER_SELECTOR)
        .map(|chunk| {
            let ids: Vec<&str> = chunk.iter().map(StackId::as_str).collect();
            ListParams::default().labels(&format!(
                "{MANAGED_BY_LABEL}={MANAGED_BY_VALUE},{STACK_ID_LABEL} in ({})",
                ids.join(",")
            ))
        })
        .collect()
}

/// The objects of the stacks `ids`, the selectors' lists run together.
async fn list_of_stacks<K>(api: &Api<K>, ids: &[StackId]) -> Result<Vec<K>, ClusterError>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let lists = futures::future::try_join_all(
        stack_selectors(ids)
            .iter()
            .map(|params| list_all(api, params, |object| object)),
    )
    .await?;
    Ok(lists.into_iter().flatten().collect())
}

/// Every object `params` selects, through `project`, one page at a time.
async fn list_all<K, T>(api: &Api<K>, params: &ListParams, project: impl FnMut(K) -> T) -> Result<Vec<T>, ClusterError>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let fetch = |page: ListParams| async move { api.list(&page).await.map_err(|e| ClusterError::from_kube("list", e)) };
    paginate(params, fetch, project).await
}

/// The pages `fetch` returns for `params`, [`LIST_PAGE`] objects each, followed through their
/// continue tokens, each object through `project`.
async fn paginate<O, T, F>(
    params: &ListParams,
    fetch: impl Fn(ListParams) -> F,
    mut project: impl FnMut(O) -> T,
) -> Result<Vec<T>, ClusterError>
where
    O: Clone,
    F: Future<Output = Result<kube::core::ObjectList<O>, ClusterError>>,
{
    let mut items = Vec::new();
    let mut params = params.clone().limit(LIST_PAGE);
    loop {
        let page = fetch(params.clone()).await?;
        items.extend(page.items.into_iter().map(&mut project));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(items),
        }
    }
}

pub(crate) fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 404)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_selectors_name_each_id_once_in_bounded_chunks() {
        assert!(stack_selectors(&[]).is_empty());
        let ids: Vec<StackId> = (0..IDS_PER_SELECTOR + 1).map(|_| StackId::generate()).collect();
        let selectors: Vec<String> = stack_selectors(&ids)
            .into_iter()
            .map(|p| p.label_selector.unwrap_or_default())
            .collect();
        assert_eq!(selectors.len(), 2);
        let mut named = Vec::new();
        for selector in &selectors {
            let list = selector
                .strip_prefix("app.kubernetes.io/managed-by=stack-provisioner,stack-provisioner/stack-id in (")
                .and_then(|s| s.strip_suffix(')'))
                .unwrap_or_else(|| panic!("{selector}"));
            named.extend(list.split(',').map(str::to_owned));
            // The request line stays under the 8 KB proxies accept.
            assert!(selector.len() < 7 * 1024, "{}", selector.len());
        }
        let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
        assert_eq!(named, ids);
    }
}
