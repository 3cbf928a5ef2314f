//! Reconciler fixtures over the real local environment: a production `Reconciler` with its own
//! counting clients over a given table and namespace, and direct seeding of what the API would
//! have written (records, labelled pods and services) or leaked (orphans).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Node, Pod, ResourceRequirements, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Api;
use stack_core::{
    Config, MANAGED_BY_LABEL, MANAGED_BY_VALUE, Manifest, PassError, PortMapping, Protocol, Reconciler, STACK_ID_LABEL,
    StackId, StackRecord, StackStatus, Stacks, Store, StoreError, Summary, run_pass,
};

use crate::api::{ApiHarness, kube_config};
use crate::env::rbac_manifest::hardened_probe_pod;
use crate::env::{EnvError, SIMULATED_ROLE, SimulatedNode, TestEnv, nodes, wait_for};

/// Time budget of a test pass: long enough never to cut a pass short on a busy machine.
pub const PASS_BUDGET: Duration = Duration::from_secs(120);
/// How long tests wait for the cluster to reach a state (pod running, object gone).
pub const CLUSTER_TIMEOUT: Duration = Duration::from_secs(60);

/// A reconciler as the Lambda builds it, over clients of its own.
pub struct TestReconciler {
    pub reconciler: Reconciler,
    pub stacks: Arc<Stacks>,
}

impl TestReconciler {
    /// A reconciler of `namespace` and `table` with the given extra variables (e.g.
    /// `STACK_ORPHAN_GRACE`); it has clients of its own, like a separate Lambda sandbox.
    pub async fn new(env: &TestEnv, namespace: &str, table: &str, overrides: &[(&str, &str)]) -> Self {
        let kube = stack_core::client_builder(&kube_config(env).await)
            .expect("kube client")
            .build();
        let stacks = stacks_over(
            reconciler_config(namespace, table, overrides),
            kube,
            env.dynamodb.clone(),
        );
        Self {
            reconciler: Reconciler::new(stacks.clone()),
            stacks,
        }
    }

    /// A reconciler over the harness's namespace and table.
    pub async fn over(api: &ApiHarness, overrides: &[(&str, &str)]) -> Self {
        Self::new(&api.env, &api.namespace, api.table.name(), overrides).await
    }

    /// One pass with a comfortable budget.
    pub async fn pass(&self) -> Summary {
        self.pass_until(Instant::now() + PASS_BUDGET)
            .await
            .expect("the pass runs")
    }

    pub async fn pass_until(&self, deadline: Instant) -> Result<Summary, PassError> {
        run_pass(&self.reconciler, deadline).await
    }

    /// The stack's record with its manifest; panics if there is none.
    pub async fn record(&self, id: &StackId) -> StackRecord {
        self.store()
            .get_stack(id, Manifest::Include)
            .await
            .expect("read the record")
            .unwrap_or_else(|| panic!("no record of {id}"))
    }

    pub fn store(&self) -> &Store {
        self.stacks.store()
    }
}

/// The reconciler's configuration for `namespace` and `table`, plus `overrides`.
pub fn reconciler_config(namespace: &str, table: &str, overrides: &[(&str, &str)]) -> Config {
    let mut vars: HashMap<String, String> = HashMap::from([
        ("STACK_NAMESPACE".into(), namespace.to_owned()),
        ("DDB_STACK_TABLE".into(), table.to_owned()),
        ("STACK_NODE_ROLE".into(), SIMULATED_ROLE.into()),
        ("STACK_PROXY_SYNC".into(), "0s".into()),
        (
            "STACK_PREPULL_NAMESPACE".into(),
            crate::api::prepull_namespace(namespace),
        ),
        ("STACK_PREPULL_IN_USE".into(), "false".into()),
    ]);
    for (k, v) in overrides {
        vars.insert((*k).into(), (*v).into());
    }
    Config::from_lookup(|name| vars.get(name).cloned()).expect("reconciler config is valid")
}

/// The stack lifecycle over the given clients, as the functions build it.
pub fn stacks_over(config: Config, kube: kube::Client, dynamodb: aws_sdk_dynamodb::Client) -> Arc<Stacks> {
    let store = Store::new(dynamodb, &config.table, config.consistent_read);
    Arc::new(Stacks::from_config(config, store, kube))
}

/// `managed-by` and `stack-id`, exactly as the API labels a stack's objects.
pub fn stack_labels(id: &StackId) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned()),
        (STACK_ID_LABEL.to_owned(), id.to_string()),
    ])
}

/// A minimal pod bound straight to `node_name` (no scheduler; kwok runs it), with tiny
/// requests, the given labels and the settings the provisioner forces (the stack namespace's
/// admission policy refuses a pod without them).
pub fn minimal_pod(name: &str, labels: BTreeMap<String, String>, node_name: &str) -> Pod {
    let tiny = BTreeMap::from([
        ("cpu".to_owned(), Quantity("1m".to_owned())),
        ("memory".to_owned(), Quantity("1Mi".to_owned())),
    ]);
    let mut pod = hardened_probe_pod();
    pod.metadata = ObjectMeta {
        name: Some(name.to_owned()),
        labels: Some(labels),
        ..ObjectMeta::default()
    };
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some(node_name.to_owned());
        for container in &mut spec.containers {
            container.name = "app".to_owned();
            container.image = Some("registry.example/ctf/app:1".to_owned());
            container.resources = Some(ResourceRequirements {
                requests: Some(tiny.clone()),
                limits: Some(tiny.clone()),
                ..ResourceRequirements::default()
            });
        }
    }
    pod
}

/// The stack's pod as the reconciler sees it: named and labelled like the API's.
pub fn stack_pod(id: &StackId, node_name: &str) -> Pod {
    minimal_pod(&id.pod_name(), stack_labels(id), node_name)
}

/// The stack's service, labelled like the API's and owned by `owner` when given. Headless and
/// without a selector: the reconciler only looks at its name and labels, and this way seeding
/// thousands neither exhausts the node-port range other tests use nor wakes the endpoints
/// controllers.
pub fn stack_service(id: &StackId, owner: Option<&Pod>) -> Service {
    let owner_references = owner.map(|pod| {
        vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            ..OwnerReference::default()
        }]
    });
    Service {
        metadata: ObjectMeta {
            name: Some(id.service_name()),
            labels: Some(stack_labels(id)),
            owner_references,
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_owned()),
            ports: Some(vec![ServicePort {
                name: Some("p0-tcp".to_owned()),
                port: 1337,
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// A record of a stack running on `node_id`, created ten minutes ago, as the API leaves it
/// once a read or a pass has refreshed it.
pub fn running_record(
    id: &StackId,
    namespace: &str,
    node_id: &str,
    node_public_ip: Option<&str>,
    ttl_expires_at: Timestamp,
) -> StackRecord {
    let created_at = Timestamp::now() - SignedDuration::from_mins(10);
    let mut record = StackRecord::test()
        .id(id.clone())
        .namespace(namespace)
        .node(node_id)
        .ports(vec![PortMapping {
            container_port: 1337,
            protocol: Protocol::Tcp,
            node_port: 31001,
        }])
        .status(StackStatus::Running)
        .created_at(created_at)
        .ttl_expires_at(ttl_expires_at)
        .requests(1, 1 << 20);
    record.node_public_ip = node_public_ip.map(str::to_owned);
    record.pod_spec = format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {id}\n");
    record
}

/// Moves a record's `ttl_expires_at` (as an operator editing the table would): the clock
/// cannot be moved, so this is how a test makes a stack expire without waiting for it.
pub async fn set_ttl(store: &Store, id: &StackId, ttl_expires_at: Timestamp) -> Result<(), StoreError> {
    let ttl = AttributeValue::S(ttl_expires_at.to_string());
    set_stored_attribute(store, "STACK", id, "ttl_expires_at", ttl).await
}

/// Sets a record's `status` to `status` as stored text, whatever it is (as an operator editing
/// the table, or a newer version with a status this one does not know, would).
pub async fn set_stored_status(store: &Store, id: &StackId, status: &str) -> Result<(), StoreError> {
    set_stored_attribute(store, "STACK", id, "status", AttributeValue::S(status.to_owned())).await
}

/// Sets one attribute of the existing item `pk`/`id` to `value` as stored, bypassing the store.
pub async fn set_stored_attribute(
    store: &Store,
    pk: &str,
    id: &StackId,
    attribute: &str,
    value: AttributeValue,
) -> Result<(), StoreError> {
    store
        .client()
        .update_item()
        .table_name(store.table())
        .set_key(Some(stored_key(pk, id)))
        .condition_expression("attribute_exists(pk)")
        .update_expression("SET #attribute = :value")
        .expression_attribute_names("#attribute", attribute)
        .expression_attribute_values(":value", value)
        .send()
        .await
        .map_err(|e| StoreError::backend("UpdateItem", e))?;
    Ok(())
}

/// The key of a stack's item in partition `pk` (see stack_core::store: pk=`STACK` or
/// `MANIFEST`, sk=stack id).
pub fn stored_key(pk: &str, id: &StackId) -> HashMap<String, AttributeValue> {
    HashMap::from([
        ("pk".to_owned(), AttributeValue::S(pk.to_owned())),
        ("sk".to_owned(), AttributeValue::S(id.to_string())),
    ])
}

/// Waits until kwok reports the pod `Running`.
pub async fn wait_pod_running(pods: &Api<Pod>, name: &str) -> Result<Pod, EnvError> {
    let running = |pod: Option<&Pod>| {
        pod.and_then(|p| p.status.as_ref())
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|phase| phase == "Running")
    };
    wait_for(pods, name, &format!("pod {name} Running"), CLUSTER_TIMEOUT, running)
        .await?
        .ok_or_else(|| EnvError::Timeout {
            what: format!("pod {name} (deleted while waiting)"),
            seconds: 0,
        })
}

/// Waits until the object no longer exists (finalizers done).
pub async fn wait_gone<K>(api: &Api<K>, name: &str) -> Result<(), EnvError>
where
    K: Clone + std::fmt::Debug + Send + serde::de::DeserializeOwned + kube::Resource + 'static,
{
    wait_for(api, name, &format!("{name} gone"), CLUSTER_TIMEOUT, |o: Option<&K>| {
        o.is_none()
    })
    .await
    .map(|_| ())
}

/// Adds a simulated node and waits until the node lifecycle controller has lifted its
/// not-ready taint, so that the scheduler places pods on it.
pub async fn add_schedulable_node(env: &TestEnv, node: &SimulatedNode) -> Result<(), EnvError> {
    nodes::add_node(&env.kube, node).await?;
    let untainted = |n: Option<&Node>| {
        n.is_some_and(|n| {
            n.spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_none_or(|t| t.is_empty())
        })
    };
    let nodes_api = Api::<Node>::all(env.kube.clone());
    wait_for(
        &nodes_api,
        &node.name,
        &format!("node {} untainted", node.name),
        CLUSTER_TIMEOUT,
        untainted,
    )
    .await
    .map(|_| ())
}

/// Resolves once the object is older than `age` by its `creationTimestamp` (whole seconds,
/// rounded down by the apiserver, so the reconciler sees it at least this old as well).
pub async fn until_older_than(meta: &ObjectMeta, age: Duration) {
    let Some(created) = meta.creation_timestamp.as_ref().map(|t| t.0) else {
        return;
    };
    let due = created + SignedDuration::try_from(age).unwrap_or(SignedDuration::MAX) + SignedDuration::from_millis(50);
    let left = Timestamp::now().duration_until(due);
    if left.is_positive() {
        tokio::time::sleep(left.unsigned_abs()).await;
    }
}
