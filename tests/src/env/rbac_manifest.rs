//! `functions/kubernetes-rbac.yaml`, the manifest an admin applies once, read from the
//! checkout (never copied) so that the local cluster and the tests get what production gets:
//! its admission policy cluster-wide, its Role for a test's own namespace.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, Pod, PodSecurityContext, PodSpec, SeccompProfile, SecurityContext,
};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use stack_core::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};

use super::nodes::probe_pod;
use super::{EnvError, TestNamespace};

/// The stack namespace the manifest names, on the lines carrying [`NAMESPACE_MARKER`].
pub const DEFAULT_NAMESPACE: &str = "stacks";
pub const NAMESPACE_MARKER: &str = "# STACK_NAMESPACE";
/// The Pod Security `baseline` admission policy's name; every refusal message starts with it.
pub const POLICY_NAME: &str = "stack-provisioner-pod-baseline";
/// The admission policy of the provisioner's forced settings.
pub const HARDENING_POLICY_NAME: &str = "stack-provisioner-pod-hardening";

const FIELD_MANAGER: &str = "stack-env";
/// The apiserver loads a new policy from its informer: about a second, more when busy.
const POLICY_ACTIVE_TIMEOUT: Duration = Duration::from_secs(30);
const POLICY_PROBE_INTERVAL: Duration = Duration::from_millis(200);

/// `functions/kubernetes-rbac.yaml` of this checkout.
pub fn rbac_manifest_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../functions/kubernetes-rbac.yaml")
}

/// The manifest's documents, as YAML values.
#[derive(Debug, Clone)]
pub struct RbacManifest {
    documents: Vec<serde_yaml::Value>,
}

impl RbacManifest {
    /// The manifest as it is, for namespace `stacks`.
    pub fn load() -> Result<Self, EnvError> {
        Self::load_for_namespace(DEFAULT_NAMESPACE)
    }

    /// The manifest for stack namespace `namespace`, rewritten like its header's `sed` recipe.
    pub fn load_for_namespace(namespace: &str) -> Result<Self, EnvError> {
        let path = rbac_manifest_path();
        let text = std::fs::read_to_string(&path).map_err(|source| EnvError::Read {
            path: path.clone(),
            source,
        })?;
        Self::parse(&for_namespace(&text, namespace)).map_err(|reason| EnvError::Template { path, reason })
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let documents = serde_yaml::Deserializer::from_str(text)
            .map(serde_yaml::Value::deserialize)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("not YAML: {e}"))?;
        Ok(Self { documents })
    }

    /// The documents of `K`'s kind, typed.
    pub fn objects<K>(&self) -> Result<Vec<K>, EnvError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        self.documents
            .iter()
            .filter(|doc| doc.get("kind").and_then(serde_yaml::Value::as_str) == Some(&*K::kind(&())))
            .map(|doc| {
                serde_yaml::from_value(doc.clone()).map_err(|e| EnvError::Template {
                    path: rbac_manifest_path(),
                    reason: format!("{}: {e}", K::kind(&())),
                })
            })
            .collect()
    }

    /// The documents of `K`'s kind that live in `namespace` (the stack namespace's Role, not
    /// the pre-pull's).
    pub fn objects_in<K>(&self, namespace: &str) -> Result<Vec<K>, EnvError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        let all = self.objects::<K>()?;
        Ok(all
            .into_iter()
            .filter(|o| o.meta().namespace.as_deref() == Some(namespace))
            .collect())
    }
}

/// Replaces `stacks` where it stands right before the marker, as
/// `sed 's/stacks\( *# STACK_NAMESPACE\)/<namespace>\1/'` does.
fn for_namespace(text: &str, namespace: &str) -> String {
    text.lines()
        .map(|line| {
            let Some(marker) = line.find(NAMESPACE_MARKER) else {
                return line.to_owned();
            };
            let value_end = line[..marker].trim_end_matches(' ').len();
            match line[..value_end].strip_suffix(DEFAULT_NAMESPACE) {
                Some(before) => format!("{before}{namespace}{}", &line[value_end..]),
                None => line.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Server-side applies `objects` through `api` (so namespaced ones land in `api`'s namespace).
pub async fn apply<K>(api: &Api<K>, objects: &[K]) -> Result<(), EnvError>
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + Serialize + DeserializeOwned,
{
    for object in objects {
        let name = object.name_any();
        api.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(object))
            .await
            .map_err(EnvError::kube(format!("apply {} {name}", K::kind(&()))))?;
    }
    Ok(())
}

/// Applies the manifest's ValidatingAdmissionPolicy objects and waits until the apiserver
/// enforces each policy.
pub async fn apply_admission_policy(client: &Client) -> Result<(), EnvError> {
    let manifest = RbacManifest::load()?;
    let policies = manifest.objects::<ValidatingAdmissionPolicy>()?;
    let bindings = manifest.objects::<ValidatingAdmissionPolicyBinding>()?;
    if policies.is_empty() || bindings.is_empty() {
        return Err(EnvError::Template {
            path: rbac_manifest_path(),
            reason: "no ValidatingAdmissionPolicy or no binding".to_owned(),
        });
    }
    apply(&Api::all(client.clone()), &policies).await?;
    apply(&Api::all(client.clone()), &bindings).await?;
    wait_policies_active(client).await
}

/// A pod that meets both policies: the settings the provisioner forces, nothing else.
pub fn hardened_probe_pod() -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("policy-probe".to_owned()),
            labels: Some([(MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some("Never".to_owned()),
            active_deadline_seconds: Some(60),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            security_context: Some(PodSecurityContext {
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".to_owned(),
                    localhost_profile: None,
                }),
                ..PodSecurityContext::default()
            }),
            containers: vec![Container {
                name: "probe".to_owned(),
                image: Some("probe".to_owned()),
                security_context: Some(SecurityContext {
                    allow_privilege_escalation: Some(false),
                    capabilities: Some(Capabilities {
                        add: None,
                        drop: Some(vec!["NET_RAW".to_owned()]),
                    }),
                    ..SecurityContext::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

/// Dry-runs, in a namespace labelled like a stack namespace, a pod each policy alone refuses
/// (a hardened pod on the host network; a bare pod) until each policy refuses its own.
async fn wait_policies_active(client: &Client) -> Result<(), EnvError> {
    let labels = [(MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned())].into();
    let namespace = TestNamespace::create_with_labels(client, "policy-probe", labels).await?;
    let mut host_network = hardened_probe_pod();
    if let Some(spec) = host_network.spec.as_mut() {
        spec.host_network = Some(true);
    }
    let bare = probe_pod("policy-probe", "probe");
    let pods: Api<Pod> = namespace.api();
    let mut outcome = Ok(());
    for (policy, probe, what) in [
        (POLICY_NAME, &host_network, "a hostNetwork pod"),
        (HARDENING_POLICY_NAME, &bare, "a pod without the forced settings"),
    ] {
        outcome = wait_refused(&pods, probe, policy, what).await;
        if outcome.is_err() {
            break;
        }
    }
    namespace.delete().await?;
    outcome
}

async fn wait_refused(pods: &Api<Pod>, probe: &Pod, policy: &str, what: &str) -> Result<(), EnvError> {
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let started = Instant::now();
    loop {
        match pods.create(&dry_run, probe).await {
            Err(kube::Error::Api(status)) if status.message.contains(&format!("'{policy}'")) => return Ok(()),
            Err(error) => return Err(EnvError::kube("dry-run policy probe pod")(error)),
            Ok(_) if started.elapsed() > POLICY_ACTIVE_TIMEOUT => {
                return Err(EnvError::Timeout {
                    what: format!("admission policy {policy} to refuse {what}"),
                    seconds: POLICY_ACTIVE_TIMEOUT.as_secs(),
                });
            }
            Ok(_) => tokio::time::sleep(POLICY_PROBE_INTERVAL).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_is_replaced_only_before_the_marker() {
        let text = "metadata:\n  name: stacks # STACK_NAMESPACE\n  other: stacks\n  - stacks   # STACK_NAMESPACE";
        assert_eq!(
            for_namespace(text, "ctf-stacks"),
            "metadata:\n  name: ctf-stacks # STACK_NAMESPACE\n  other: stacks\n  - ctf-stacks   # STACK_NAMESPACE"
        );
    }
}
