//! References to Secrets and ConfigMaps of the stack namespace.
//!
//! The namespace holds the operator's objects too (e.g. the registry pull secret), and a
//! participant with a shell in a stack reads whatever the pod mounts or gets in its
//! environment. So a manifest may reference only objects the operator shared with stacks by
//! name (`STACK_SHARED_CONFIGMAPS`, `STACK_SHARED_SECRETS`), in every place a pod can:
//! volumes, projected sources, `env[].valueFrom`, `envFrom`. `imagePullSecrets` has its own
//! list (`STACK_IMAGE_PULL_SECRETS`): the kubelet uses those to pull, the pod cannot read them.
//!
//! An allowlist rather than a label on the object checked at create time: the validator stays
//! a pure function of the manifest and the configuration (a 400 never depends on an apiserver
//! call inside the create's time budget), the provisioner needs no right to read Secrets, and
//! a label could be added later by anyone able to edit objects in the namespace.

use k8s_openapi::api::core::v1::{Container, PodSpec};

use super::rejection::ContainerPath;
use super::{Rejection, ValidationPolicy};

#[derive(Clone, Copy)]
enum Kind {
    ConfigMap,
    Secret,
    PullSecret,
}

impl Kind {
    fn shared(self, policy: &ValidationPolicy) -> &[String] {
        match self {
            Kind::ConfigMap => &policy.shared_config_maps,
            Kind::Secret => &policy.shared_secrets,
            Kind::PullSecret => &policy.image_pull_secrets,
        }
    }

    fn why(self, name: &str) -> String {
        match self {
            Kind::ConfigMap => format!("ConfigMap {name:?} is not shared with stacks (STACK_SHARED_CONFIGMAPS)"),
            Kind::Secret => format!("Secret {name:?} is not shared with stacks (STACK_SHARED_SECRETS)"),
            Kind::PullSecret => format!("Secret {name:?} is not a pull secret for stacks (STACK_IMAGE_PULL_SECRETS)"),
        }
    }
}

fn allow(kind: Kind, name: &str, at: impl FnOnce() -> String, policy: &ValidationPolicy) -> Result<(), Rejection> {
    if kind.shared(policy).iter().any(|shared| shared == name) {
        Ok(())
    } else {
        Err(Rejection::forbidden_because(at(), &kind.why(name)))
    }
}

pub(super) fn check(spec: &PodSpec, policy: &ValidationPolicy) -> Result<(), Rejection> {
    for (index, reference) in spec.image_pull_secrets.iter().flatten().enumerate() {
        allow(
            Kind::PullSecret,
            &reference.name,
            || format!("spec.imagePullSecrets[{index}].name"),
            policy,
        )?;
    }
    for (index, volume) in spec.volumes.iter().flatten().enumerate() {
        let at = format!("spec.volumes[{index}]");
        if let Some(source) = &volume.config_map {
            allow(Kind::ConfigMap, &source.name, || format!("{at}.configMap.name"), policy)?;
        }
        if let Some(source) = &volume.secret {
            let name = source.secret_name.as_deref().unwrap_or_default();
            allow(Kind::Secret, name, || format!("{at}.secret.secretName"), policy)?;
        }
        let sources = volume.projected.iter().flat_map(|p| p.sources.iter().flatten());
        for (source_index, source) in sources.enumerate() {
            let named = [
                (
                    Kind::ConfigMap,
                    source.config_map.as_ref().map(|c| &c.name),
                    "configMap",
                ),
                (Kind::Secret, source.secret.as_ref().map(|c| &c.name), "secret"),
            ];
            let path = |field: &str| format!("{at}.projected.sources[{source_index}].{field}.name");
            allow_named(named, path, policy)?;
        }
    }
    for (at, container) in ContainerPath::every(spec) {
        check_container(container, at, policy)?;
    }
    Ok(())
}

fn check_container(container: &Container, at: ContainerPath, policy: &ValidationPolicy) -> Result<(), Rejection> {
    for (index, var) in container.env.iter().flatten().enumerate() {
        let Some(from) = &var.value_from else { continue };
        let named = [
            (
                Kind::ConfigMap,
                from.config_map_key_ref.as_ref().map(|k| &k.name),
                "configMapKeyRef",
            ),
            (
                Kind::Secret,
                from.secret_key_ref.as_ref().map(|k| &k.name),
                "secretKeyRef",
            ),
        ];
        let path = |field: &str| at.field(&format!("env[{index}].valueFrom.{field}.name"));
        allow_named(named, path, policy)?;
    }
    for (index, source) in container.env_from.iter().flatten().enumerate() {
        let named = [
            (
                Kind::ConfigMap,
                source.config_map_ref.as_ref().map(|r| &r.name),
                "configMapRef",
            ),
            (Kind::Secret, source.secret_ref.as_ref().map(|r| &r.name), "secretRef"),
        ];
        let path = |field: &str| at.field(&format!("envFrom[{index}].{field}.name"));
        allow_named(named, path, policy)?;
    }
    Ok(())
}

/// [`allow`] for each `(kind, name if set, field)` of one env entry or projected source;
/// `path` makes the field's path only for a refusal.
fn allow_named(
    named: [(Kind, Option<&String>, &str); 2],
    path: impl Fn(&str) -> String,
    policy: &ValidationPolicy,
) -> Result<(), Rejection> {
    for (kind, name, field) in named {
        if let Some(name) = name {
            allow(kind, name, || path(field), policy)?;
        }
    }
    Ok(())
}
