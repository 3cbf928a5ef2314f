//! Rules for the Pod's `metadata`. `name`, `generateName` and `namespace` are accepted and
//! then replaced (existing platforms send manifests that name their pod); fields the cluster
//! sets, finalizers and owner references are refused; label and annotation keys may not use
//! reserved prefixes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::Rejection;
use crate::model::{MANAGED_BY_LABEL, OWN_LABEL_PREFIX};

const RESERVED_KEY: &str = "keys under kubernetes.io, k8s.io and stack-provisioner/ are reserved";

pub fn check(meta: &ObjectMeta) -> Result<(), Rejection> {
    let ObjectMeta {
        annotations,
        creation_timestamp,
        deletion_grace_period_seconds,
        deletion_timestamp,
        finalizers,
        generate_name: _,
        generation,
        labels,
        managed_fields,
        name: _,
        namespace: _,
        owner_references,
        resource_version,
        self_link,
        uid,
    } = meta;
    let set_by_cluster = [
        ("creationTimestamp", creation_timestamp.is_some()),
        ("deletionGracePeriodSeconds", deletion_grace_period_seconds.is_some()),
        ("deletionTimestamp", deletion_timestamp.is_some()),
        ("generation", generation.is_some()),
        ("managedFields", managed_fields.is_some()),
        ("resourceVersion", resource_version.is_some()),
        ("selfLink", self_link.is_some()),
        ("uid", uid.is_some()),
    ];
    if let Some((field, _)) = set_by_cluster.iter().find(|(_, set)| *set) {
        return Err(Rejection::forbidden_because(
            format!("metadata.{field}"),
            "it is set by the cluster",
        ));
    }
    if finalizers.is_some() {
        return Err(Rejection::forbidden_because(
            "metadata.finalizers",
            "they would keep the pod from being deleted",
        ));
    }
    if owner_references.is_some() {
        return Err(Rejection::forbidden_because(
            "metadata.ownerReferences",
            "stacks are owned by the provisioner",
        ));
    }
    for (field, map) in [("labels", labels), ("annotations", annotations)] {
        if let Some(key) = map.iter().flat_map(|m| m.keys()).find(|key| is_reserved_key(key)) {
            return Err(Rejection::forbidden_because(
                format!("metadata.{field}.{key}"),
                RESERVED_KEY,
            ));
        }
    }
    Ok(())
}

/// Keys under `kubernetes.io` / `k8s.io` (and their subdomains, which hold the AppArmor and
/// seccomp annotations) drive cluster behaviour, and ours drive the provisioner.
/// `app.kubernetes.io/*` is only the informational "recommended labels", so it stays usable,
/// except our `managed-by`.
fn is_reserved_key(key: &str) -> bool {
    let Some((prefix, _)) = key.split_once('/') else {
        return false;
    };
    let prefix = prefix.to_ascii_lowercase();
    if key.eq_ignore_ascii_case(MANAGED_BY_LABEL) || format!("{prefix}/") == OWN_LABEL_PREFIX {
        return true;
    }
    if prefix == "app.kubernetes.io" {
        return false;
    }
    ["kubernetes.io", "k8s.io"]
        .iter()
        .any(|domain| prefix == *domain || prefix.ends_with(&format!(".{domain}")))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn with_label(key: &str) -> ObjectMeta {
        ObjectMeta {
            labels: Some(BTreeMap::from([(key.to_owned(), "v".to_owned())])),
            ..Default::default()
        }
    }

    fn with_annotation(key: &str) -> ObjectMeta {
        ObjectMeta {
            annotations: Some(BTreeMap::from([(key.to_owned(), "v".to_owned())])),
            ..Default::default()
        }
    }

    #[test]
    fn ordinary_metadata_passes() {
        let meta = ObjectMeta {
            name: Some("challenge".into()),
            generate_name: Some("chal-".into()),
            namespace: Some("elsewhere".into()),
            ..with_label("app")
        };
        assert_eq!(check(&meta), Ok(()));
        for key in [
            "app",
            "example.com/team",
            "app.kubernetes.io/name",
            "kubernetes.io.example.com/x",
            "notk8s.io/x",
        ] {
            assert_eq!(check(&with_label(key)), Ok(()), "{key}");
            assert_eq!(check(&with_annotation(key)), Ok(()), "{key}");
        }
    }

    #[test]
    fn reserved_keys_are_rejected() {
        for key in [
            "kubernetes.io/x",
            "node.kubernetes.io/role",
            "container.apparmor.security.beta.kubernetes.io/app",
            "seccomp.security.alpha.kubernetes.io/pod",
            "k8s.io/x",
            "x.k8s.io/y",
            "Node.Kubernetes.IO/x",
            "stack-provisioner/stack-id",
            "stack-provisioner/other",
            "app.kubernetes.io/managed-by",
        ] {
            let label = check(&with_label(key)).unwrap_err();
            assert_eq!(label.path, format!("metadata.labels.{key}"));
            assert!(label.problem.starts_with("is forbidden"), "{label}");
            assert_eq!(
                check(&with_annotation(key)).unwrap_err().path,
                format!("metadata.annotations.{key}")
            );
        }
    }

    #[test]
    fn cluster_owned_fields_are_rejected() {
        let cases = [
            (
                ObjectMeta {
                    uid: Some("u".into()),
                    ..Default::default()
                },
                "metadata.uid",
            ),
            (
                ObjectMeta {
                    resource_version: Some("1".into()),
                    ..Default::default()
                },
                "metadata.resourceVersion",
            ),
            (
                ObjectMeta {
                    generation: Some(1),
                    ..Default::default()
                },
                "metadata.generation",
            ),
            (
                ObjectMeta {
                    managed_fields: Some(vec![]),
                    ..Default::default()
                },
                "metadata.managedFields",
            ),
            (
                ObjectMeta {
                    finalizers: Some(vec!["x/y".into()]),
                    ..Default::default()
                },
                "metadata.finalizers",
            ),
            (
                ObjectMeta {
                    owner_references: Some(vec![]),
                    ..Default::default()
                },
                "metadata.ownerReferences",
            ),
        ];
        for (meta, path) in cases {
            assert_eq!(check(&meta).unwrap_err().path, path);
        }
    }
}
