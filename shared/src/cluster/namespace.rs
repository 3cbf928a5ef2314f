//! The stack namespace's guard rails: Pod Security `baseline` enforcement, ensured on first
//! use, and the isolation NetworkPolicy (`isolation.rs`), applied again and checked against
//! the namespace's other policies at most every [`ISOLATION_CHECK_TTL`], so that a policy
//! deleted, edited or widened by another one is seen within a minute, not at the next start.
//!
//! In hostport mode Pod Security cannot enforce `baseline` (it forbids host ports), so the
//! admission policy of `functions/kubernetes-rbac.yaml` enforces it instead: stacks are
//! created only once its binding exists and the namespace is one it selects.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use tokio::sync::OnceCell;

use super::ClusterError;
use super::isolation::{ISOLATION_POLICY_NAME, LEGACY_POLICY_NAME, isolation_policy, widening_policies};
use crate::config::Isolation;
use crate::model::{Exposure, MANAGED_BY_LABEL, MANAGED_BY_VALUE};

/// The binding of the Pod Security `baseline` admission policy (`functions/kubernetes-rbac.yaml`).
const ADMISSION_POLICY_BINDING: &str = "stack-provisioner-pod-baseline";
const ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";
const FIELD_MANAGER: &str = "stack-provisioner";
/// A checked isolation is trusted this long before it is applied and checked again.
const ISOLATION_CHECK_TTL: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Default)]
pub struct NamespacePolicy {
    pub isolation: Isolation,
    /// Refuse creates (503) while another policy widens the isolation.
    pub require_isolation: bool,
    /// Stacks prove their isolation before they run (reported only; `validate` adds the check).
    pub checked_per_stack: bool,
}

pub(crate) struct NamespaceGuard {
    client: Client,
    namespace: String,
    policy: NamespacePolicy,
    exposure: Exposure,
    ensured: OnceCell<()>,
    last_isolation: tokio::sync::Mutex<Option<(Instant, IsolationReport)>>,
    legacy_removed: AtomicBool,
}

/// What `/stats` and the dashboard say of the isolation.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct IsolationReport {
    /// The isolation policy is applied and no other NetworkPolicy widens it.
    pub in_place: bool,
    /// When the namespace's policies were last read (RFC 3339).
    pub checked_at: String,
    /// What widens it, one line per policy.
    pub problems: Vec<String>,
    /// Each stack waits until its isolation is enforced (`STACK_ISOLATION_CHECK_IMAGE`).
    pub checked_per_stack: bool,
}

impl NamespaceGuard {
    pub(crate) fn new(client: Client, namespace: &str, policy: NamespacePolicy, exposure: Exposure) -> Self {
        Self {
            client,
            namespace: namespace.to_owned(),
            policy,
            exposure,
            ensured: OnceCell::new(),
            last_isolation: tokio::sync::Mutex::new(None),
            legacy_removed: AtomicBool::new(false),
        }
    }

    /// The guard rails, and the isolation unless another policy widens it while it is required.
    pub(crate) async fn ensure(&self) -> Result<(), ClusterError> {
        let report = self.isolation().await?;
        if !report.in_place && self.policy.require_isolation {
            let why = format!("isolation not in place: {}", report.problems.join("; "));
            return Err(ClusterError::Unguarded(why));
        }
        Ok(())
    }

    /// The isolation as last checked, checked again when older than [`ISOLATION_CHECK_TTL`];
    /// a widened one is checked on every call, so that its repair shows at once.
    /// One check at a time: creates arriving together wait for it and share its answer.
    pub(crate) async fn isolation(&self) -> Result<IsolationReport, ClusterError> {
        self.ensured.get_or_try_init(|| self.create_guard_rails()).await?;
        let mut last = self.last_isolation.lock().await;
        if let Some((at, report)) = last.as_ref()
            && report.in_place
            && at.elapsed() < ISOLATION_CHECK_TTL
        {
            return Ok(report.clone());
        }
        let problems = self.apply_isolation().await?;
        if !problems.is_empty() {
            tracing::warn!(namespace = %self.namespace, ?problems, "isolation not in place");
        }
        let report = IsolationReport {
            in_place: problems.is_empty(),
            checked_at: jiff::Timestamp::now().to_string(),
            problems,
            checked_per_stack: self.policy.checked_per_stack,
        };
        *last = Some((Instant::now(), report.clone()));
        Ok(report)
    }

    /// Applies the isolation policy (server-side apply: an edited one is put back), removes
    /// the legacy one, and names the namespace's policies that widen it.
    async fn apply_isolation(&self) -> Result<Vec<String>, ClusterError> {
        let policies: Api<NetworkPolicy> = Api::namespaced(self.client.clone(), &self.namespace);
        policies
            .patch(
                ISOLATION_POLICY_NAME,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&isolation_policy(&self.policy.isolation)),
            )
            .await
            .map_err(|e| ClusterError::from_kube("apply network policy", e))?;
        // Earlier versions' egress guard allowed private ranges: gone once ours is in place, and
        // once per process is enough.
        if !self.legacy_removed.load(Ordering::Relaxed) {
            match policies.delete(LEGACY_POLICY_NAME, &DeleteParams::default()).await {
                Ok(_) => tracing::info!(namespace = %self.namespace, "removed the legacy egress guard"),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(ClusterError::from_kube("delete network policy", e)),
            }
            self.legacy_removed.store(true, Ordering::Relaxed);
        }
        let list = policies
            .list(&ListParams::default())
            .await
            .map_err(|e| ClusterError::from_kube("list network policies", e))?;
        Ok(widening_policies(&list.items))
    }

    async fn create_guard_rails(&self) -> Result<(), ClusterError> {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        match namespaces
            .get_opt(&self.namespace)
            .await
            .map_err(|e| ClusterError::from_kube("get namespace", e))?
        {
            Some(existing) => {
                let labels = existing.metadata.labels.unwrap_or_default();
                if let Some(problem) = unfit_labels(&self.namespace, &labels, self.exposure) {
                    return Err(ClusterError::Unguarded(problem));
                }
                if self.exposure == Exposure::NodePort && !labels.contains_key(ENFORCE_LABEL) {
                    tracing::warn!(namespace = %self.namespace, "stack namespace exists without Pod Security enforcement");
                }
            }
            None => {
                let created = namespaces
                    .create(
                        &PostParams::default(),
                        &namespace_object(&self.namespace, self.exposure),
                    )
                    .await;
                match created {
                    Ok(_) => tracing::info!(namespace = %self.namespace, "created stack namespace"),
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return Err(ClusterError::from_kube("create namespace", e)),
                }
                self.ensure_default_service_account().await?;
            }
        }
        if self.exposure == Exposure::HostPort {
            self.check_admission_policy().await?;
        }
        Ok(())
    }

    /// Host ports are only offered while the admission policy guards the namespace in Pod
    /// Security's place.
    async fn check_admission_policy(&self) -> Result<(), ClusterError> {
        let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(self.client.clone());
        match bindings
            .get_opt(ADMISSION_POLICY_BINDING)
            .await
            .map_err(|e| ClusterError::from_kube("get admission policy binding", e))?
        {
            Some(_) => Ok(()),
            None => Err(ClusterError::Unguarded(format!(
                "STACK_EXPOSURE=hostport needs the admission policy binding {ADMISSION_POLICY_BINDING} \
                 (kubectl apply -f functions/kubernetes-rbac.yaml)"
            ))),
        }
    }

    /// Pod admission needs the `default` service account, which a controller creates shortly
    /// after the namespace; creating it ourselves spares the first stack a spurious refusal.
    async fn ensure_default_service_account(&self) -> Result<(), ClusterError> {
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &self.namespace);
        let account = ServiceAccount {
            metadata: ObjectMeta {
                name: Some("default".to_owned()),
                ..ObjectMeta::default()
            },
            automount_service_account_token: Some(false),
            ..ServiceAccount::default()
        };
        match accounts.create(&PostParams::default(), &account).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(ClusterError::from_kube("create service account", e)),
        }
    }
}

/// Why an existing namespace cannot take this mode's stacks: in hostport mode, Pod Security
/// enforcing more than `privileged` (it would refuse every pod), or no managed-by label (the
/// admission policy would not select it).
fn unfit_labels(name: &str, labels: &BTreeMap<String, String>, exposure: Exposure) -> Option<String> {
    if exposure != Exposure::HostPort {
        return None;
    }
    if labels.get(MANAGED_BY_LABEL).map(String::as_str) != Some(MANAGED_BY_VALUE) {
        return Some(format!(
            "namespace {name} lacks the label {MANAGED_BY_LABEL}={MANAGED_BY_VALUE} by which the admission policy selects it"
        ));
    }
    match labels.get(ENFORCE_LABEL).map(String::as_str) {
        None | Some("privileged") => None,
        Some(level) => Some(format!(
            "namespace {name} enforces Pod Security {level}, which forbids host ports: set {ENFORCE_LABEL}=privileged \
             (the admission policy enforces baseline instead) or use STACK_EXPOSURE=nodeport"
        )),
    }
}

/// The namespace as the functions create it: Pod Security `baseline`, or in hostport mode
/// `privileged` (the admission policy selecting the managed-by label enforces baseline).
fn namespace_object(name: &str, exposure: Exposure) -> Namespace {
    let security = match exposure {
        Exposure::NodePort => vec![
            (ENFORCE_LABEL, "baseline"),
            ("pod-security.kubernetes.io/enforce-version", "latest"),
            ("pod-security.kubernetes.io/warn", "baseline"),
        ],
        Exposure::HostPort => vec![(ENFORCE_LABEL, "privileged")],
    };
    let labels = security
        .into_iter()
        .chain([(MANAGED_BY_LABEL, MANAGED_BY_VALUE)])
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hostport_namespace_drops_pod_security_but_keeps_the_label_the_policy_selects() {
        let labels = |e| namespace_object("stacks", e).metadata.labels.unwrap();
        let nodeport = labels(Exposure::NodePort);
        assert_eq!(nodeport[ENFORCE_LABEL], "baseline");
        let hostport = labels(Exposure::HostPort);
        assert_eq!(hostport[ENFORCE_LABEL], "privileged");
        assert_eq!(hostport[MANAGED_BY_LABEL], MANAGED_BY_VALUE);
        assert_eq!(unfit_labels("stacks", &hostport, Exposure::HostPort), None);
        // A namespace made for nodeport cannot take host ports until relabelled.
        let why = unfit_labels("stacks", &nodeport, Exposure::HostPort).unwrap();
        assert!(why.contains("enforces Pod Security baseline"), "{why}");
        assert_eq!(unfit_labels("stacks", &nodeport, Exposure::NodePort), None);
        let unlabelled = BTreeMap::from([(ENFORCE_LABEL.to_owned(), "privileged".to_owned())]);
        assert!(unfit_labels("stacks", &unlabelled, Exposure::HostPort).is_some());
    }
}
