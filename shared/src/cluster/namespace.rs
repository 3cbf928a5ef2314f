//! The stack namespace's guard rails, ensured on first use: Pod Security `baseline`
//! enforcement and an egress NetworkPolicy that keeps stacks away from the cloud metadata
//! service (node credentials) and any configured CIDRs.
//!
//! In hostport mode Pod Security cannot enforce `baseline` (it forbids host ports), so the
//! admission policy of `functions/kubernetes-rbac.yaml` enforces it instead: stacks are
//! created only once its binding exists and the namespace is one it selects.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyPeer, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use tokio::sync::OnceCell;

use super::ClusterError;
use crate::model::{Exposure, MANAGED_BY_LABEL, MANAGED_BY_VALUE};

pub(super) const EGRESS_POLICY_NAME: &str = "stack-provisioner-egress-guard";
/// The binding of the Pod Security `baseline` admission policy (`functions/kubernetes-rbac.yaml`).
const ADMISSION_POLICY_BINDING: &str = "stack-provisioner-pod-baseline";
const ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";
const FIELD_MANAGER: &str = "stack-provisioner";
/// A found ingress policy is trusted this long before we look again.
const INGRESS_CHECK_TTL: Duration = Duration::from_secs(60);
/// Cloud metadata endpoints (IPv4 link-local covers AWS, GCP, Azure; EC2's IPv6 one).
const METADATA_V4: &str = "169.254.0.0/16";
const METADATA_V6: &str = "fd00:ec2::254/128";

#[derive(Debug, Clone, Default)]
pub struct NamespacePolicy {
    pub deny_egress_cidrs: Vec<String>,
    pub require_ingress_policy: bool,
}

pub(crate) struct NamespaceGuard {
    client: Client,
    namespace: String,
    policy: NamespacePolicy,
    exposure: Exposure,
    ensured: OnceCell<()>,
    ingress_seen_at: Mutex<Option<Instant>>,
}

impl NamespaceGuard {
    pub(crate) fn new(client: Client, namespace: &str, policy: NamespacePolicy, exposure: Exposure) -> Self {
        Self {
            client,
            namespace: namespace.to_owned(),
            policy,
            exposure,
            ensured: OnceCell::new(),
            ingress_seen_at: Mutex::new(None),
        }
    }

    pub(crate) async fn ensure(&self) -> Result<(), ClusterError> {
        self.ensured.get_or_try_init(|| self.create_guard_rails()).await?;
        if self.policy.require_ingress_policy {
            self.check_ingress_policy().await?;
        }
        Ok(())
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
        let policies: Api<NetworkPolicy> = Api::namespaced(self.client.clone(), &self.namespace);
        let policy = egress_guard(&self.policy.deny_egress_cidrs);
        policies
            .patch(
                EGRESS_POLICY_NAME,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&policy),
            )
            .await
            .map_err(|e| ClusterError::from_kube("apply network policy", e))?;
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

    async fn check_ingress_policy(&self) -> Result<(), ClusterError> {
        let fresh = |seen: &Option<Instant>| seen.is_some_and(|at| at.elapsed() < INGRESS_CHECK_TTL);
        if fresh(
            &self
                .ingress_seen_at
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        ) {
            return Ok(());
        }
        let policies: Api<NetworkPolicy> = Api::namespaced(self.client.clone(), &self.namespace);
        let list = policies
            .list(&ListParams::default())
            .await
            .map_err(|e| ClusterError::from_kube("list network policies", e))?;
        if list.items.iter().any(restricts_ingress) {
            *self
                .ingress_seen_at
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
            Ok(())
        } else {
            Err(ClusterError::MissingIngressPolicy(self.namespace.clone()))
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

/// Egress allowed everywhere except cloud metadata and `deny` (split by address family).
pub(crate) fn egress_guard(deny: &[String]) -> NetworkPolicy {
    let (deny_v6, deny_v4): (Vec<&String>, Vec<&String>) = deny.iter().partition(|c| c.contains(':'));
    let block = |cidr: &str, except: Vec<String>| NetworkPolicyPeer {
        ip_block: Some(IPBlock {
            cidr: cidr.to_owned(),
            except: Some(except),
        }),
        ..NetworkPolicyPeer::default()
    };
    let v4_except = std::iter::once(METADATA_V4.to_owned())
        .chain(deny_v4.into_iter().cloned())
        .collect();
    let v6_except = std::iter::once(METADATA_V6.to_owned())
        .chain(deny_v6.into_iter().cloned())
        .collect();
    NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(EGRESS_POLICY_NAME.to_owned()),
            labels: Some(BTreeMap::from([(
                MANAGED_BY_LABEL.to_owned(),
                MANAGED_BY_VALUE.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    MANAGED_BY_LABEL.to_owned(),
                    MANAGED_BY_VALUE.to_owned(),
                )])),
                ..LabelSelector::default()
            }),
            policy_types: Some(vec!["Egress".to_owned()]),
            egress: Some(vec![NetworkPolicyEgressRule {
                to: Some(vec![block("0.0.0.0/0", v4_except), block("::/0", v6_except)]),
                ports: None,
            }]),
            ..NetworkPolicySpec::default()
        }),
    }
}

fn restricts_ingress(policy: &NetworkPolicy) -> bool {
    policy.spec.as_ref().is_some_and(|spec| match &spec.policy_types {
        Some(types) => types.iter().any(|t| t == "Ingress"),
        // Without policyTypes, every policy restricts ingress.
        None => true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn egress_guard_blocks_metadata_and_configured_cidrs() {
        let policy = egress_guard(&["10.0.0.0/8".into(), "fd00::/8".into()]);
        let rule = &policy.spec.as_ref().unwrap().egress.as_ref().unwrap()[0];
        let blocks: Vec<&IPBlock> = rule
            .to
            .as_ref()
            .unwrap()
            .iter()
            .map(|p| p.ip_block.as_ref().unwrap())
            .collect();
        assert_eq!(blocks[0].cidr, "0.0.0.0/0");
        assert_eq!(blocks[0].except.as_deref().unwrap(), ["169.254.0.0/16", "10.0.0.0/8"]);
        assert_eq!(blocks[1].cidr, "::/0");
        assert_eq!(blocks[1].except.as_deref().unwrap(), ["fd00:ec2::254/128", "fd00::/8"]);
    }

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

    #[test]
    fn only_ingress_policies_count() {
        let with_types = |types: Option<Vec<&str>>| NetworkPolicy {
            spec: Some(NetworkPolicySpec {
                policy_types: types.map(|t| t.into_iter().map(String::from).collect()),
                ..NetworkPolicySpec::default()
            }),
            ..NetworkPolicy::default()
        };
        assert!(restricts_ingress(&with_types(Some(vec!["Ingress"]))));
        assert!(restricts_ingress(&with_types(None)));
        assert!(!restricts_ingress(&with_types(Some(vec!["Egress"]))));
        assert!(!restricts_ingress(&egress_guard(&[])));
    }
}
