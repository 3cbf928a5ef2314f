//! What the validator enforces, taken from the configuration once at start-up.

use crate::config::{Config, ConfigError, DropCapabilities, NodeTaint, PodLimits};

use super::quantity;

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
    /// `STACK_EPHEMERAL_STORAGE_LIMIT` in bytes: the stack's ephemeral-storage budget, shared by
    /// the limits of all its containers, and the cap on every emptyDir `sizeLimit`.
    pub ephemeral_storage_limit: i64,
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
    pub const DEFAULT_MAX_MANIFEST_BYTES: usize = 256 * 1024;

    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let mut problems = Vec::new();
        let ephemeral_storage_limit = quantity::parse_bytes(&config.ephemeral_storage_limit).unwrap_or_else(|err| {
            problems.push(format!(
                "STACK_EPHEMERAL_STORAGE_LIMIT: {err} (got {:?})",
                config.ephemeral_storage_limit
            ));
            0
        });
        // Rounded up so a sub-second lifetime still gives the pod a positive deadline.
        let max_lifetime_secs = i64::try_from(config.max_lifetime.as_secs())
            .unwrap_or(i64::MAX)
            .saturating_add(i64::from(config.max_lifetime.subsec_nanos() > 0));
        if max_lifetime_secs <= 0 {
            problems.push("STACK_MAX_LIFETIME: must be positive".into());
        }
        if !problems.is_empty() {
            return Err(ConfigError { problems });
        }
        Ok(Self {
            namespace: config.namespace.clone(),
            node_role: config.node_role.clone(),
            max_lifetime_secs,
            max_cpu_milli: config.max_cpu_milli,
            max_memory_bytes: config.max_memory_bytes,
            ephemeral_storage_limit,
            image_allowlist: config.image_allowlist.clone(),
            runtime_class: config.runtime_class.clone(),
            user_namespaces: config.user_namespaces,
            isolation_check_image: config.isolation_check_image.clone(),
            drop_capabilities: config.drop_capabilities,
            add_back_capabilities: config.add_back_capabilities.clone(),
            node_taint: config.node_taint.clone(),
            shared_config_maps: config.shared_config_maps.clone(),
            shared_secrets: config.shared_secrets.clone(),
            image_pull_secrets: config.image_pull_secrets.clone(),
            label_allowlist: config.label_allowlist.clone(),
            annotation_allowlist: config.annotation_allowlist.clone(),
            pod_limits: config.pod_limits,
            max_manifest_bytes: Self::DEFAULT_MAX_MANIFEST_BYTES,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use super::*;

    fn config(vars: &[(&str, &str)]) -> Config {
        let mut map: HashMap<&str, &str> = vars.iter().copied().collect();
        map.insert("API_KEY", "k");
        Config::from_lookup(|name| map.get(name).map(|v| v.to_string())).unwrap()
    }

    #[test]
    fn built_from_configuration() {
        let policy = ValidationPolicy::from_config(&config(&[
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
        ]))
        .unwrap();
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
        assert_eq!(
            ValidationPolicy::from_config(&config(&[]))
                .unwrap()
                .ephemeral_storage_limit,
            1 << 30
        );
    }

    #[test]
    fn bad_values_are_named() {
        let mut bad = config(&[("STACK_EPHEMERAL_STORAGE_LIMIT", "lots")]);
        bad.max_lifetime = Duration::ZERO;
        let err = ValidationPolicy::from_config(&bad).unwrap_err();
        assert_eq!(err.problems.len(), 2, "{err}");
        assert!(err.problems[0].starts_with("STACK_EPHEMERAL_STORAGE_LIMIT"), "{err}");
        assert!(err.problems[1].starts_with("STACK_MAX_LIFETIME"), "{err}");
    }
}
