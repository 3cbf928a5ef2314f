//! The pre-pull DaemonSet (pure): one pod per stack node, one container per image.
//!
//! Each container runs a `sleep` that an init container copied from the helper image (a static
//! busybox) into a shared volume, so an image needs no shell, `sleep` or `true` of its own. A
//! running container keeps its image in use, so the kubelet's image garbage collection never
//! takes it. The pod asks for next to nothing, holds no token, runs as nobody under the
//! runtime's seccomp profile with every capability dropped, reaches nothing (the namespace's
//! deny-all policy) and tolerates only the startup taint and the stack nodes' own taint. The
//! helper image is among the images held: the pod needs it, and the DaemonSet never holds none.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec, DaemonSetUpdateStrategy, RollingUpdateDaemonSet};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, PodSecurityContext, PodSpec, PodTemplateSpec, ResourceRequirements,
    SeccompProfile, SecurityContext, Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::state::PrepullState;
use crate::cluster::PrepullObjects;
use crate::config::{NodeTaint, PrepullPolicy};
use crate::model::STARTUP_TAINT;

/// The annotation that carries [`PrepullState`] from one pass to the next.
const STATE_ANNOTATION: &str = "stack-provisioner.io/prepull-state";
/// The init container that copies the helper's busybox, and where to.
const COPY_CONTAINER: &str = "copy-sleep";
const TOOLS_DIR: &str = "/prepull";
const NOBODY: i64 = 65534;

/// What the DaemonSet is built from.
pub(crate) struct Blueprint<'a> {
    pub policy: &'a PrepullPolicy,
    /// `STACK_NODE_ROLE`.
    pub node_role: &'a str,
    /// `STACK_NODE_TAINT`.
    pub node_taint: Option<&'a NodeTaint>,
}

impl Blueprint<'_> {
    pub(crate) fn daemon_set(&self, images: &BTreeSet<String>, state: &PrepullState) -> DaemonSet {
        let labels = PrepullObjects::labels();
        let state_json = serde_json::to_string(state).unwrap_or_default();
        DaemonSet {
            metadata: ObjectMeta {
                name: Some(crate::cluster::PREPULL_NAME.to_owned()),
                namespace: Some(self.policy.namespace.clone()),
                labels: Some(labels.clone()),
                annotations: Some(BTreeMap::from([(STATE_ANNOTATION.to_owned(), state_json)])),
                ..ObjectMeta::default()
            },
            spec: Some(DaemonSetSpec {
                selector: LabelSelector {
                    match_labels: Some(labels.clone()),
                    ..LabelSelector::default()
                },
                // The new pod comes up beside the old one, which keeps its images in use until
                // the new one holds them all.
                update_strategy: Some(DaemonSetUpdateStrategy {
                    type_: Some("RollingUpdate".to_owned()),
                    rolling_update: Some(RollingUpdateDaemonSet {
                        max_surge: Some(IntOrString::String("100%".to_owned())),
                        max_unavailable: Some(IntOrString::Int(0)),
                    }),
                }),
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(labels),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(self.pod_spec(images)),
                },
                ..DaemonSetSpec::default()
            }),
            status: None,
        }
    }

    fn pod_spec(&self, images: &BTreeSet<String>) -> PodSpec {
        let sleep = format!("{TOOLS_DIR}/sleep");
        let copy = Container {
            name: COPY_CONTAINER.to_owned(),
            image: Some(self.policy.helper_image.clone()),
            command: Some(vec![
                "/bin/busybox".to_owned(),
                "cp".to_owned(),
                "/bin/busybox".to_owned(),
                sleep.clone(),
            ]),
            volume_mounts: Some(vec![tools_mount(false)]),
            ..hardened_container()
        };
        let holders = images
            .iter()
            .enumerate()
            .map(|(index, image)| Container {
                name: container_name(index),
                image: Some(image.clone()),
                image_pull_policy: Some("IfNotPresent".to_owned()),
                // A busybox applet runs by the name it is called by.
                command: Some(vec![sleep.clone(), "2147483647".to_owned()]),
                volume_mounts: Some(vec![tools_mount(true)]),
                ..hardened_container()
            })
            .collect();
        let tolerations = std::iter::once(Toleration {
            key: Some(STARTUP_TAINT.to_owned()),
            operator: Some("Exists".to_owned()),
            effect: Some("NoSchedule".to_owned()),
            ..Toleration::default()
        })
        .chain(self.node_taint.map(NodeTaint::toleration))
        .collect();
        PodSpec {
            init_containers: Some(vec![copy]),
            containers: holders,
            node_selector: Some(BTreeMap::from([("role".to_owned(), self.node_role.to_owned())])),
            tolerations: Some(tolerations),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            // busybox's sleep as PID 1 ignores SIGTERM: nothing to wait for.
            termination_grace_period_seconds: Some(1),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(NOBODY),
                run_as_group: Some(NOBODY),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".to_owned(),
                    localhost_profile: None,
                }),
                ..PodSecurityContext::default()
            }),
            volumes: Some(vec![Volume {
                name: "tools".to_owned(),
                empty_dir: Some(EmptyDirVolumeSource {
                    size_limit: Some(Quantity("16Mi".to_owned())),
                    ..EmptyDirVolumeSource::default()
                }),
                ..Volume::default()
            }]),
            ..PodSpec::default()
        }
    }
}

/// The container that holds the image at `index` of the sorted list.
fn container_name(index: usize) -> String {
    format!("image-{index}")
}

/// The state a DaemonSet carries; a missing or unreadable annotation starts afresh.
pub(crate) fn state_of(daemon_set: &DaemonSet) -> PrepullState {
    daemon_set
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(STATE_ANNOTATION))
        .and_then(|json| serde_json::from_str(json).ok())
        .unwrap_or_default()
}

/// The images a DaemonSet's pods hold.
pub(crate) fn images_of(daemon_set: &DaemonSet) -> BTreeSet<String> {
    daemon_set
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .map(|spec| spec.containers.iter().filter_map(|c| c.image.clone()).collect())
        .unwrap_or_default()
}

fn tools_mount(read_only: bool) -> VolumeMount {
    VolumeMount {
        name: "tools".to_owned(),
        mount_path: TOOLS_DIR.to_owned(),
        read_only: Some(read_only),
        ..VolumeMount::default()
    }
}

/// Next to no resources (a sleeping static binary), and the hardening of a stack's container.
fn hardened_container() -> Container {
    let quantities = |cpu: &str, memory: &str| {
        BTreeMap::from([
            ("cpu".to_owned(), Quantity(cpu.to_owned())),
            ("memory".to_owned(), Quantity(memory.to_owned())),
        ])
    };
    Container {
        resources: Some(ResourceRequirements {
            requests: Some(quantities("1m", "4Mi")),
            limits: Some(quantities("10m", "16Mi")),
            ..ResourceRequirements::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_owned()]),
                add: None,
            }),
            read_only_root_filesystem: Some(true),
            ..SecurityContext::default()
        }),
        ..Container::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn policy() -> PrepullPolicy {
        PrepullPolicy {
            images: vec![],
            namespace: "stack-prepull".into(),
            helper_image: "registry.example/busybox:1".into(),
            keep: Duration::from_secs(60),
            in_use: true,
        }
    }

    #[test]
    fn each_image_gets_a_hardened_container_that_runs_the_copied_sleep() {
        let policy = policy();
        let taint = NodeTaint {
            key: "ctf.example/stacks".into(),
            value: None,
            effect: "NoSchedule".into(),
        };
        let blueprint = Blueprint {
            policy: &policy,
            node_role: "stack",
            node_taint: Some(&taint),
        };
        let images: BTreeSet<String> = ["r/web:1".to_owned(), "r/pwn@sha256:ab".to_owned()].into();
        let mut state = PrepullState::default();
        state.declare("ctf", images.clone());
        let ds = blueprint.daemon_set(&images, &state);
        assert_eq!(images_of(&ds), images);
        assert_eq!(state_of(&ds), state);
        let spec = ds.spec.unwrap().template.spec.unwrap();
        for container in &spec.containers {
            assert_eq!(container.command.as_ref().unwrap()[0], "/prepull/sleep");
            let security = container.security_context.as_ref().unwrap();
            assert_eq!(security.allow_privilege_escalation, Some(false));
            assert_eq!(
                security.capabilities.as_ref().unwrap().drop.as_deref(),
                Some(&["ALL".to_owned()][..])
            );
        }
        assert_eq!(spec.automount_service_account_token, Some(false));
        assert_eq!(spec.security_context.unwrap().run_as_non_root, Some(true));
        let tolerated: Vec<_> = spec.tolerations.unwrap().into_iter().filter_map(|t| t.key).collect();
        assert_eq!(tolerated, [STARTUP_TAINT, "ctf.example/stacks"]);
        assert_eq!(
            spec.init_containers.unwrap()[0].image.as_deref(),
            Some("registry.example/busybox:1")
        );
    }
}
