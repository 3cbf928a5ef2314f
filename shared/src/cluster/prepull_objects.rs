//! The pre-pull's objects in its own namespace: the namespace (Pod Security `restricted`), a
//! NetworkPolicy that lets its pods reach nothing, the DaemonSet and its pods; and the one
//! change it makes outside: the startup taint's removal from a node.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicySpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use tokio::sync::OnceCell;

use super::ClusterError;
use crate::model::STARTUP_TAINT;

/// Name of the DaemonSet, and the label its pods carry.
pub(crate) const PREPULL_NAME: &str = "stack-prepull";
const APP_LABEL: &str = "app.kubernetes.io/name";
const PART_OF_LABEL: &str = "app.kubernetes.io/part-of";
const DENY_ALL_POLICY: &str = "stack-prepull-deny-all";

pub(crate) struct PrepullObjects {
    client: Client,
    namespace: String,
    daemon_sets: Api<DaemonSet>,
    pods: Api<Pod>,
    nodes: Api<Node>,
    ensured: OnceCell<()>,
}

impl PrepullObjects {
    pub(crate) fn new(client: Client, namespace: &str) -> Self {
        Self {
            daemon_sets: Api::namespaced(client.clone(), namespace),
            pods: Api::namespaced(client.clone(), namespace),
            nodes: Api::all(client.clone()),
            namespace: namespace.to_owned(),
            client,
            ensured: OnceCell::new(),
        }
    }

    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The labels of the DaemonSet and of its pods.
    pub(crate) fn labels() -> BTreeMap<String, String> {
        [(APP_LABEL, PREPULL_NAME), (PART_OF_LABEL, "stack-provisioner")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    pub(crate) async fn daemon_set(&self) -> Result<Option<DaemonSet>, ClusterError> {
        self.daemon_sets
            .get_opt(PREPULL_NAME)
            .await
            .map_err(|e| ClusterError::from_kube("get pre-pull daemon set", e))
    }

    /// Creates the DaemonSet, or replaces `existing` with it: [`ClusterError::Conflict`] when
    /// another writer changed it since it was read (the caller reads again).
    pub(crate) async fn save(&self, mut wanted: DaemonSet, existing: Option<&DaemonSet>) -> Result<(), ClusterError> {
        self.ensured.get_or_try_init(|| self.ensure_namespace()).await?;
        let params = PostParams::default();
        let saved = match existing {
            Some(existing) => {
                wanted.metadata.resource_version = existing.metadata.resource_version.clone();
                self.daemon_sets.replace(PREPULL_NAME, &params, &wanted).await
            }
            None => self.daemon_sets.create(&params, &wanted).await,
        };
        match saved {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Err(ClusterError::Conflict),
            Err(e) => Err(ClusterError::from_kube("save pre-pull daemon set", e)),
        }
    }

    /// Removes the DaemonSet (its pods go with it).
    pub(crate) async fn delete(&self) -> Result<(), ClusterError> {
        match self.daemon_sets.delete(PREPULL_NAME, &DeleteParams::background()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(ClusterError::from_kube("delete pre-pull daemon set", e)),
        }
    }

    pub(crate) async fn pods(&self) -> Result<Vec<Pod>, ClusterError> {
        let params = ListParams::default().labels(&format!("{APP_LABEL}={PREPULL_NAME}"));
        self.pods
            .list(&params)
            .await
            .map(|list| list.items)
            .map_err(|e| ClusterError::from_kube("list pre-pull pods", e))
    }

    /// Removes [`STARTUP_TAINT`] from `node`, unless its taints changed since it was read.
    pub(crate) async fn remove_startup_taint(&self, node: &Node) -> Result<(), ClusterError> {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let taints = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
        let kept: Vec<_> = taints.iter().filter(|t| t.key != STARTUP_TAINT).cloned().collect();
        // The resource version makes the patch conditional: a taint another controller added
        // meanwhile is not dropped with ours (the apiserver answers 409 instead).
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": node.metadata.resource_version},
            "spec": {"taints": kept},
        });
        match self
            .nodes
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Err(ClusterError::Conflict),
            Err(e) => Err(ClusterError::from_kube("remove the startup taint", e)),
        }
    }

    /// The namespace and its deny-all policy, once per process; an admin may have made both
    /// (`functions/kubernetes-rbac.yaml`).
    async fn ensure_namespace(&self) -> Result<(), ClusterError> {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let labels = [
            ("pod-security.kubernetes.io/enforce", "restricted"),
            ("pod-security.kubernetes.io/enforce-version", "latest"),
            (PART_OF_LABEL, "stack-provisioner"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(self.namespace.clone()),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        match namespaces.create(&PostParams::default(), &namespace).await {
            Ok(_) => tracing::info!(namespace = %self.namespace, "created the pre-pull namespace"),
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 403 => {}
            Err(e) => return Err(ClusterError::from_kube("create pre-pull namespace", e)),
        }
        let policies: Api<NetworkPolicy> = Api::namespaced(self.client.clone(), &self.namespace);
        let deny_all = NetworkPolicy {
            metadata: ObjectMeta {
                name: Some(DENY_ALL_POLICY.to_owned()),
                labels: Some(Self::labels()),
                ..ObjectMeta::default()
            },
            spec: Some(NetworkPolicySpec {
                pod_selector: Some(LabelSelector::default()),
                policy_types: Some(vec!["Ingress".to_owned(), "Egress".to_owned()]),
                ..NetworkPolicySpec::default()
            }),
        };
        policies
            .patch(
                DENY_ALL_POLICY,
                &PatchParams::apply("stack-provisioner").force(),
                &Patch::Apply(&deny_all),
            )
            .await
            .map_err(|e| ClusterError::from_kube("apply the pre-pull network policy", e))?;
        Ok(())
    }
}
