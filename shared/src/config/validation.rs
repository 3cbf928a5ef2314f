//! What the validator enforces (`validate`), read from the environment with the rest of the
//! configuration: one field per setting, parsed once.

use std::time::Duration;

use super::hardening::{self, DropCapabilities, NodeTaint};
use super::{
    DEFAULT_ANNOTATION_ALLOWLIST, DEFAULT_LABEL_ALLOWLIST, PodLimits, Reader, parse_at_least_one, parse_bool,
    parse_positive, to_strings,
};
use crate::quantity;

/// The limits and forced values `validate` applies to every manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationPolicy {
    /// `STACK_NAMESPACE`: the pod's namespace, whatever the manifest says.
    pub namespace: String,
    /// `STACK_NODE_ROLE`: forced as `nodeSelector.role`.
    pub node_role: String,
    /// `STACK_MAX_LIFETIME` in seconds: the pod's `activeDeadlineSeconds` ceiling.
    pub max_lifetime_secs: i64,
    /// `STACK_MAX_CPU_MILLI`: ceiling on the pod's effective CPU request.
    pub max_cpu_milli: Option<i64>,
    /// `STACK_MAX_MEMORY_BYTES`: ceiling on the pod's effective memory request.
    pub max_memory_bytes: Option<i64>,
    /// `STACK_CPU_LIMITS`: a container's CPU is also its limit (a CFS quota); `false` leaves it
    /// a request only, the stack's share of its node when the node is busy.
    pub cpu_limits: bool,
    /// `STACK_EPHEMERAL_STORAGE_LIMIT` in bytes: the stack's ephemeral-storage budget, shared by
    /// the limits of all its containers, and the cap on every emptyDir `sizeLimit`.
    pub ephemeral_storage_limit: i64,
    /// `STACK_EMPTY_DIRS_IN_MEMORY`: every emptyDir is forced to `medium: Memory`, a tmpfs of its
    /// `sizeLimit` counted in the stack's memory: a write past either fails at once, and none
    /// reaches the node's disk.
    pub empty_dirs_in_memory: bool,
    /// `STACK_IMAGE_ALLOWLIST`: registry/repository prefixes images must start with; empty allows any.
    pub image_allowlist: Vec<String>,
    /// `STACK_RUNTIME_CLASS`: forced as `runtimeClassName` (a manifest may not choose one).
    pub runtime_class: Option<String>,
    /// `STACK_USER_NAMESPACES`: forced `hostUsers: false`.
    pub user_namespaces: bool,
    /// `STACK_ISOLATION_CHECK_IMAGE`: the image of the init container that holds every stack
    /// back until its isolation is enforced (`isolation_check.rs`); none, no check.
    pub isolation_check_image: Option<String>,
    /// `STACK_DROP_CAPABILITIES`: forced into every container's `capabilities.drop`.
    pub drop_capabilities: DropCapabilities,
    /// `STACK_ADD_BACK_CAPABILITIES`: the only capabilities `capabilities.add` may name.
    pub add_back_capabilities: Vec<String>,
    /// `STACK_NODE_TAINT`: tolerated by every stack pod.
    pub node_taint: Option<NodeTaint>,
    /// `STACK_SHARED_CONFIGMAPS`: the only ConfigMaps a manifest may reference.
    pub shared_config_maps: Vec<String>,
    /// `STACK_SHARED_SECRETS`: the only Secrets a manifest may reference.
    pub shared_secrets: Vec<String>,
    /// `STACK_IMAGE_PULL_SECRETS`: the only Secrets `imagePullSecrets` may name.
    pub image_pull_secrets: Vec<String>,
    /// `STACK_LABEL_ALLOWLIST`: label key patterns.
    pub label_allowlist: Vec<String>,
    /// `STACK_ANNOTATION_ALLOWLIST`: annotation key patterns.
    pub annotation_allowlist: Vec<String>,
    /// `STACK_MAX_CONTAINERS` and friends.
    pub pod_limits: PodLimits,
    /// Longest manifest accepted, in bytes.
    pub max_manifest_bytes: usize,
}

impl ValidationPolicy {
    pub(crate) const DEFAULT_MAX_MANIFEST_BYTES: usize = 256 * 1024;

    /// Reads the validator's settings; `max_lifetime` is `STACK_MAX_LIFETIME`, already read.
    pub(super) fn read<F: Fn(&str) -> Option<String>>(env: &mut Reader<'_, F>, max_lifetime: Duration) -> Self {
        let ephemeral_storage_limit = env.parse("STACK_EPHEMERAL_STORAGE_LIMIT", 1 << 30, |v| {
            quantity::parse_bytes(v).map_err(|err| err.to_string())
        });
        // Rounded up so a sub-second lifetime still gives the pod a positive deadline (a zero
        // lifetime is refused with the other checks of `STACK_MAX_LIFETIME`).
        let max_lifetime_secs = i64::try_from(max_lifetime.as_secs())
            .unwrap_or(i64::MAX)
            .saturating_add(i64::from(max_lifetime.subsec_nanos() > 0));
        Self {
            namespace: env.string("STACK_NAMESPACE").unwrap_or_else(|| "stacks".into()),
            node_role: env.string("STACK_NODE_ROLE").unwrap_or_else(|| "stack".into()),
            max_lifetime_secs,
            max_cpu_milli: env.parse_opt("STACK_MAX_CPU_MILLI", parse_positive),
            max_memory_bytes: env.parse_opt("STACK_MAX_MEMORY_BYTES", parse_positive),
            cpu_limits: env.parse("STACK_CPU_LIMITS", true, parse_bool),
            ephemeral_storage_limit,
            empty_dirs_in_memory: env.parse("STACK_EMPTY_DIRS_IN_MEMORY", false, parse_bool),
            image_allowlist: env.list("STACK_IMAGE_ALLOWLIST").unwrap_or_default(),
            runtime_class: env.string("STACK_RUNTIME_CLASS"),
            user_namespaces: env.parse("STACK_USER_NAMESPACES", false, parse_bool),
            isolation_check_image: env.string("STACK_ISOLATION_CHECK_IMAGE"),
            drop_capabilities: env.parse(
                "STACK_DROP_CAPABILITIES",
                DropCapabilities::default(),
                hardening::parse_drop_capabilities,
            ),
            add_back_capabilities: env.parse(
                "STACK_ADD_BACK_CAPABILITIES",
                hardening::default_add_back(),
                hardening::parse_add_back,
            ),
            node_taint: env.parse_opt("STACK_NODE_TAINT", hardening::parse_node_taint),
            shared_config_maps: env.list("STACK_SHARED_CONFIGMAPS").unwrap_or_default(),
            shared_secrets: env.list("STACK_SHARED_SECRETS").unwrap_or_default(),
            image_pull_secrets: env.list("STACK_IMAGE_PULL_SECRETS").unwrap_or_default(),
            label_allowlist: env
                .list("STACK_LABEL_ALLOWLIST")
                .unwrap_or_else(|| to_strings(DEFAULT_LABEL_ALLOWLIST)),
            annotation_allowlist: env
                .list("STACK_ANNOTATION_ALLOWLIST")
                .unwrap_or_else(|| to_strings(DEFAULT_ANNOTATION_ALLOWLIST)),
            pod_limits: PodLimits {
                containers: env.parse(
                    "STACK_MAX_CONTAINERS",
                    PodLimits::DEFAULT.containers,
                    parse_at_least_one,
                ),
                init_containers: env.parse(
                    "STACK_MAX_INIT_CONTAINERS",
                    PodLimits::DEFAULT.init_containers,
                    parse_at_least_one,
                ),
                volumes: env.parse("STACK_MAX_VOLUMES", PodLimits::DEFAULT.volumes, parse_at_least_one),
                env: env.parse("STACK_MAX_ENV", PodLimits::DEFAULT.env, parse_at_least_one),
                ports: env.parse(
                    "STACK_MAX_CONTAINER_PORTS",
                    PodLimits::DEFAULT.ports,
                    parse_at_least_one,
                ),
            },
            max_manifest_bytes: Self::DEFAULT_MAX_MANIFEST_BYTES,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::super::{Config, ConfigError};

    fn config(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let mut map: HashMap<&str, &str> = vars.iter().copied().collect();
        map.insert("API_KEY", "k");
        Config::from_lookup(|name| map.get(name).map(|v| v.to_string()))
    }

    #[test]
    fn built_from_configuration() {
        let policy = config(&[
            ("STACK_NAMESPACE", "ctf"),
            ("STACK_NODE_ROLE", "chall"),
            ("STACK_MAX_LIFETIME", "8h"),
            ("STACK_MAX_CPU_MILLI", "2000"),
            ("STACK_EPHEMERAL_STORAGE_LIMIT", "512Mi"),
            ("STACK_IMAGE_ALLOWLIST", "registry.example.com/ctf/, ghcr.io/org/"),
            ("STACK_SHARED_CONFIGMAPS", "scripts"),
            ("STACK_SHARED_SECRETS", "flag,motd"),
            ("STACK_IMAGE_PULL_SECRETS", "regcred"),
            ("STACK_ANNOTATION_ALLOWLIST", "ctf.example.com/*"),
            ("STACK_MAX_VOLUMES", "4"),
        ])
        .unwrap()
        .validation;
        assert_eq!(policy.shared_config_maps, ["scripts"]);
        assert_eq!(policy.shared_secrets, ["flag", "motd"]);
        assert_eq!(policy.image_pull_secrets, ["regcred"]);
        assert_eq!(policy.annotation_allowlist, ["ctf.example.com/*"]);
        assert_eq!(policy.label_allowlist, ["*", "*/*"]);
        assert_eq!(policy.pod_limits.volumes, 4);
        assert_eq!(policy.namespace, "ctf");
        assert_eq!(policy.node_role, "chall");
        assert_eq!(policy.max_lifetime_secs, 8 * 3600);
        assert_eq!(policy.max_cpu_milli, Some(2000));
        assert_eq!(policy.max_memory_bytes, None);
        assert_eq!(policy.ephemeral_storage_limit, 512 << 20);
        assert_eq!(policy.image_allowlist, ["registry.example.com/ctf/", "ghcr.io/org/"]);
        assert_eq!(policy.max_manifest_bytes, 256 * 1024);
    }

    #[test]
    fn default_ephemeral_limit_is_one_gibibyte() {
        assert_eq!(config(&[]).unwrap().validation.ephemeral_storage_limit, 1 << 30);
    }

    #[test]
    fn bad_values_are_named() {
        let err = config(&[("STACK_EPHEMERAL_STORAGE_LIMIT", "lots"), ("STACK_MAX_LIFETIME", "0s")]).unwrap_err();
        for name in [
            "STACK_EPHEMERAL_STORAGE_LIMIT: ",
            "STACK_MAX_LIFETIME: must be positive",
        ] {
            assert!(err.problems.iter().any(|p| p.starts_with(name)), "{name}: {err}");
        }
    }
}
