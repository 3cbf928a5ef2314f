//! Rules for the Pod's `metadata`. `name`, `generateName` and `namespace` are accepted and
//! then replaced (existing platforms send manifests that name their pod); `creationTimestamp`,
//! `uid`, `generation` and `selfLink` (in `kubectl get -o yaml` output) are accepted and
//! dropped, as the apiserver overwrites them on create; other fields the cluster sets,
//! finalizers and owner references are refused.
//!
//! Label and annotation keys must match the configured allowlists (`*` matches any run of
//! characters but `/`). Keys steer add-ons (CNI multiplexers, node-IAM proxies, autoscalers),
//! so annotations default to unprefixed keys only (private to the author by Kubernetes
//! convention) plus kubectl's informational ones. Keys under `kubernetes.io`/`k8s.io` pass
//! only when an entry names them exactly, and ours never.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::rejection::{forbid_any, forbid_if};
use super::{Rejection, ValidationPolicy};
use crate::kube_names::{is_label_value, is_qualified_name};
use crate::model::{MANAGED_BY_LABEL, OWN_LABEL_PREFIX};

const OS_LABEL: &str = "kubernetes.io/os";
const RESERVED_KEY: &str = "keys under kubernetes.io, k8s.io and stack-provisioner/ are reserved";

pub(super) fn check(meta: &ObjectMeta, policy: &ValidationPolicy) -> Result<(), Rejection> {
    let ObjectMeta {
        annotations,
        // Overwritten by the apiserver on create; dropped by `harden`.
        creation_timestamp: _,
        deletion_grace_period_seconds,
        deletion_timestamp,
        finalizers,
        generate_name: _,
        generation: _,
        labels,
        managed_fields,
        name: _,
        namespace: _,
        owner_references,
        resource_version,
        self_link: _,
        uid: _,
    } = meta;
    // A resourceVersion makes the apiserver refuse a create; the others would mean something.
    let set_by_cluster = [
        ("deletionGracePeriodSeconds", deletion_grace_period_seconds.is_some()),
        ("deletionTimestamp", deletion_timestamp.is_some()),
        ("managedFields", managed_fields.is_some()),
        ("resourceVersion", resource_version.is_some()),
    ];
    forbid_any("metadata", &set_by_cluster, "it is set by the cluster")?;
    forbid_if(
        finalizers.is_some(),
        "metadata.finalizers",
        "they would keep the pod from being deleted",
    )?;
    forbid_if(
        owner_references.is_some(),
        "metadata.ownerReferences",
        "stacks are owned by the provisioner",
    )?;
    for (field, map, allowlist) in [
        ("labels", labels, &policy.label_allowlist),
        ("annotations", annotations, &policy.annotation_allowlist),
    ] {
        for (key, value) in map.iter().flatten() {
            // What the apiserver would refuse after the stack's other objects exist.
            if !is_qualified_name(key) {
                return Err(Rejection::new(
                    format!("metadata.{field}.{key}"),
                    "is not a valid key (an optional DNS-subdomain prefix and '/', then a name of at most 63 letters, digits, '-', '_' or '.')",
                ));
            }
            if field == "labels" && !is_label_value(value) {
                return Err(Rejection::new(
                    format!("metadata.{field}.{key}"),
                    "must be at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
                ));
            }
            let named = allowlist.iter().any(|entry| entry == key);
            if is_own_key(key) || (is_reserved_key(key) && !named) {
                return Err(Rejection::forbidden_because(
                    format!("metadata.{field}.{key}"),
                    RESERVED_KEY,
                ));
            }
            if !named && !allowlist.iter().any(|entry| key_matches(entry, key)) {
                return Err(Rejection::forbidden_because(
                    format!("metadata.{field}.{key}"),
                    &format!("the key is not in the {field} allowlist ({})", allowlist.join(", ")),
                ));
            }
        }
    }
    // The kubelet refuses a pod whose label names another OS than its node's
    // (`rejectPodAdmissionBasedOnOSSelector`), and stack nodes run Linux (`spec.os.name`).
    // Reachable only when the label allowlist names the key.
    if let Some(os) = labels.as_ref().and_then(|l| l.get(OS_LABEL))
        && os != "linux"
    {
        return Err(Rejection::new(
            format!("metadata.labels.{OS_LABEL}"),
            "must be linux: the kubelet refuses a pod labelled for another OS than its node's",
        ));
    }
    let annotation_bytes: usize = annotations.iter().flatten().map(|(k, v)| k.len() + v.len()).sum();
    if annotation_bytes > MAX_ANNOTATION_BYTES {
        return Err(Rejection::new(
            "metadata.annotations",
            format!("must total at most {MAX_ANNOTATION_BYTES} bytes"),
        ));
    }
    Ok(())
}

/// The apiserver's limit on all annotations of an object.
const MAX_ANNOTATION_BYTES: usize = 256 * 1024;

/// `pattern` with `*` matching any run of characters but `/`.
fn key_matches(pattern: &str, key: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == key,
        Some((head, tail)) => key.strip_prefix(head).is_some_and(|rest| {
            // Try every split of `rest` where the `*` part has no '/'.
            rest.char_indices()
                .map(|(at, _)| at)
                .chain([rest.len()])
                .take_while(|at| !rest[..*at].contains('/'))
                .any(|at| key_matches(tail, &rest[at..]))
        }),
    }
}

fn is_own_key(key: &str) -> bool {
    key.eq_ignore_ascii_case(MANAGED_BY_LABEL)
        || key
            .split_once('/')
            .is_some_and(|(prefix, _)| format!("{}/", prefix.to_ascii_lowercase()) == OWN_LABEL_PREFIX)
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
    if prefix == "app.kubernetes.io" {
        return false;
    }
    ["kubernetes.io", "k8s.io"]
        .iter()
        .any(|domain| prefix == *domain || prefix.ends_with(&format!(".{domain}")))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::validate::tests::policy;

    fn check(meta: &ObjectMeta) -> Result<(), Rejection> {
        super::check(meta, &policy())
    }

    /// Metadata as a manifest writes it.
    fn meta(value: Value) -> ObjectMeta {
        serde_json::from_value(value).expect("an ObjectMeta")
    }

    fn with_label(key: &str) -> ObjectMeta {
        meta(json!({"labels": {key: "v"}}))
    }

    fn with_annotation(key: &str) -> ObjectMeta {
        meta(json!({"annotations": {key: "v"}}))
    }

    /// Asserts that `key` in `field` (`labels` or `annotations`) is refused as forbidden.
    fn assert_key_forbidden(field: &str, key: &str) {
        let r = check(&meta(json!({field: {key: "v"}}))).unwrap_err();
        assert_eq!(r.path, format!("metadata.{field}.{key}"));
        assert!(r.problem.starts_with("is forbidden"), "{r}");
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
        }
        for key in [
            "description",
            "app.kubernetes.io/name",
            "kubectl.kubernetes.io/default-container",
            "kubectl.kubernetes.io/last-applied-configuration",
        ] {
            assert_eq!(check(&with_annotation(key)), Ok(()), "{key}");
        }
    }

    #[test]
    fn annotations_outside_the_allowlist_are_refused() {
        for key in [
            "k8s.v1.cni.cncf.io/networks",
            "iam.amazonaws.com/role",
            "karpenter.sh/do-not-disrupt",
            "cluster-autoscaler.kubernetes.io/safe-to-evict",
            "sidecar.istio.io/inject",
            "example.com/team",
        ] {
            assert_key_forbidden("annotations", key);
        }
        let team = ValidationPolicy {
            annotation_allowlist: vec!["ctf.example.com/*".into(), "kubernetes.io/x".into()],
            label_allowlist: vec!["challenge".into()],
            ..policy()
        };
        let ok = |meta: &ObjectMeta| super::check(meta, &team);
        assert_eq!(ok(&with_annotation("ctf.example.com/author")), Ok(()));
        assert_eq!(ok(&with_annotation("kubernetes.io/x")), Ok(()), "named exactly");
        assert!(ok(&with_annotation("description")).is_err());
        assert!(ok(&with_annotation("ctf.example.com/a/b")).is_err());
        assert_eq!(ok(&with_label("challenge")), Ok(()));
        assert!(ok(&with_label("app")).is_err());
    }

    #[test]
    fn keys_and_label_values_the_apiserver_refuses_are_refused_here() {
        for key in [
            "",
            "/x",
            "a/b/c",
            "Example.com/x",
            "x/",
            "-a",
            "a b",
            &"a".repeat(64),
            "ex_ample.com/x",
        ] {
            assert!(check(&with_label(key)).is_err(), "{key:?}");
            assert!(check(&with_annotation(key)).is_err(), "{key:?}");
        }
        for value in ["-x", "x-", "a b", &"v".repeat(64)] {
            assert!(check(&meta(json!({"labels": {"app": value}}))).is_err(), "{value:?}");
        }
        let big = ObjectMeta {
            annotations: Some((0..300).map(|i| (format!("k{i}"), "v".repeat(1000))).collect()),
            ..Default::default()
        };
        assert_eq!(check(&big).unwrap_err().path, "metadata.annotations");
    }

    #[test]
    fn key_patterns() {
        let rows = [
            ("*", "app", true),
            ("*", "example.com/app", false),
            ("*/*", "example.com/app", true),
            ("ctf.io/*", "ctf.io/x", true),
            ("ctf.io/*", "ctf.io/", true),
            ("ctf.io/*", "evil.ctf.io/x", false),
            ("*.ctf.io/*", "team.ctf.io/x", true),
            ("*.ctf.io/*", "a/b.ctf.io/x", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
        ];
        for (pattern, key, want) in rows {
            assert_eq!(key_matches(pattern, key), want, "{pattern} {key}");
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
            "stack-provisioner/stack-id",
            "stack-provisioner/other",
            "app.kubernetes.io/managed-by",
        ] {
            assert_key_forbidden("labels", key);
            assert_key_forbidden("annotations", key);
        }
    }

    #[test]
    fn cluster_owned_fields_are_rejected() {
        let overwritten = meta(json!({"uid": "u", "generation": 1, "selfLink": "/api/v1/x"}));
        assert_eq!(check(&overwritten), Ok(()));
        for (field, value) in [
            ("resourceVersion", json!("1")),
            ("managedFields", json!([])),
            ("finalizers", json!(["x/y"])),
            ("ownerReferences", json!([])),
        ] {
            let refused = check(&meta(json!({field: value}))).unwrap_err();
            assert_eq!(refused.path, format!("metadata.{field}"));
        }
    }
}
