//! Pod-level `spec` fields. Every field of `PodSpec` is named below (no `..`), so a new field in
//! an upgraded k8s-openapi fails to compile until someone decides whether it is safe.
//! Containers, volumes and resources have their own modules.
//!
//! Values the cluster itself would set (`kubectl get -o yaml` output) are accepted where they
//! ask for nothing: an empty `securityContext`, `serviceAccountName: default`, `schedulerName:
//! default-scheduler`, `priority: 0` with `preemptionPolicy: PreemptLowerPriority`, the
//! not-ready/unreachable tolerations the apiserver adds, the toleration of the operator's
//! `STACK_NODE_TAINT`, and `enableServiceLinks: true` (forced to false like `restartPolicy` to
//! Never).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Affinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PodSpec, Toleration,
};

use super::rejection::{forbid_any, forbid_if};
use super::{Rejection, ValidationPolicy, security_context};
use crate::config::NodeTaint;
use crate::model::STARTUP_TAINT;

/// Longest `terminationGracePeriodSeconds` accepted: a longer one would hold the pod (and its
/// node port) long after the stack was deleted.
pub(crate) const MAX_TERMINATION_GRACE_SECS: i64 = 30;

pub(super) fn check(spec: &PodSpec, policy: &ValidationPolicy) -> Result<(), Rejection> {
    let PodSpec {
        active_deadline_seconds,
        affinity,
        automount_service_account_token,
        containers: _,
        // Resolver settings only change which DNS server the pod itself asks.
        dns_config: _,
        dns_policy: _,
        // Forced to false whatever the manifest says (`kubectl get -o yaml` shows true).
        enable_service_links: _,
        ephemeral_containers,
        // Entries in the pod's own /etc/hosts.
        host_aliases: _,
        host_ipc,
        host_network,
        host_pid,
        host_users,
        // The FQDN they may make is checked by `check_fqdn`, once the pod has its name.
        hostname: _,
        hostname_override: _,
        // Pull credentials of the stack namespace; the namespace is the provisioner's.
        image_pull_secrets: _,
        init_containers: _,
        node_name,
        node_selector,
        os,
        overhead,
        preemption_policy,
        priority,
        priority_class_name,
        readiness_gates,
        resource_claims,
        resources,
        // Forced to Never; any input value is replaced (many manifests say Always).
        restart_policy: _,
        runtime_class_name,
        scheduler_name,
        scheduling_gates,
        security_context,
        service_account,
        service_account_name,
        set_hostname_as_fqdn: _,
        // Shares processes only among the pod's own containers.
        share_process_namespace: _,
        subdomain: _,
        termination_grace_period_seconds,
        tolerations,
        topology_spread_constraints,
        volumes: _,
    } = spec;

    let host_namespaces = [
        ("hostNetwork", *host_network == Some(true)),
        ("hostPID", *host_pid == Some(true)),
        ("hostIPC", *host_ipc == Some(true)),
    ];
    forbid_any("spec", &host_namespaces, "it shares a namespace with the node")?;
    forbid_if(
        *host_users == Some(true),
        "spec.hostUsers",
        "only false (a user namespace) is allowed",
    )?;
    let not_default = |value: &Option<String>, default: &str| value.as_deref().is_some_and(|v| v != default);
    let forbidden = [
        (
            "serviceAccount",
            not_default(service_account, "default"),
            "stacks run without a service account",
        ),
        (
            "serviceAccountName",
            not_default(service_account_name, "default"),
            "stacks run without a service account",
        ),
        ("nodeName", node_name.is_some(), "it bypasses the scheduler"),
        (
            "schedulerName",
            not_default(scheduler_name, "default-scheduler"),
            "stacks use the default scheduler",
        ),
        (
            "runtimeClassName",
            runtime_class_name.is_some(),
            "stacks use the default runtime",
        ),
        ("overhead", overhead.is_some(), "it is set by the cluster"),
        (
            "priority",
            priority.is_some_and(|p| p != 0),
            "stacks may not preempt other pods",
        ),
        (
            "priorityClassName",
            priority_class_name.is_some(),
            "stacks may not preempt other pods",
        ),
        (
            "preemptionPolicy",
            not_default(preemption_policy, "PreemptLowerPriority"),
            "stacks may not preempt other pods",
        ),
        (
            "ephemeralContainers",
            ephemeral_containers.is_some(),
            "they are added only by debugging tools",
        ),
        (
            "resourceClaims",
            resource_claims.is_some(),
            "stacks may not claim devices",
        ),
        ("resources", resources.is_some(), "set resources per container"),
        (
            "schedulingGates",
            scheduling_gates.is_some(),
            "they would keep the pod pending",
        ),
        (
            "topologySpreadConstraints",
            topology_spread_constraints.is_some(),
            "a stack is a single pod",
        ),
        (
            "readinessGates",
            readiness_gates.as_ref().is_some_and(|gates| !gates.is_empty()),
            "nothing sets their conditions on a stack's pod, so it would never be Ready",
        ),
    ];
    if let Some((field, _, why)) = forbidden.iter().find(|(_, set, _)| *set) {
        return Err(Rejection::forbidden_because(format!("spec.{field}"), why));
    }
    // Only what hardens the pod; `harden` merges it with the forced settings.
    if let Some(context) = security_context {
        security_context::check_pod(context)?;
    }
    forbid_if(
        *automount_service_account_token == Some(true),
        "spec.automountServiceAccountToken",
        "stacks get no API token",
    )?;
    if active_deadline_seconds.is_some_and(|secs| secs <= 0) {
        return Err(Rejection::new("spec.activeDeadlineSeconds", "must be positive"));
    }
    if termination_grace_period_seconds.is_some_and(|secs| !(0..=MAX_TERMINATION_GRACE_SECS).contains(&secs)) {
        return Err(Rejection::new(
            "spec.terminationGracePeriodSeconds",
            format!("must be between 0 and {MAX_TERMINATION_GRACE_SECS}"),
        ));
    }
    if os.as_ref().is_some_and(|os| os.name != "linux") {
        return Err(Rejection::new("spec.os.name", "must be linux"));
    }
    for (key, value) in node_selector.iter().flatten() {
        if key != "role" {
            return Err(Rejection::forbidden_because(
                format!("spec.nodeSelector.{key}"),
                "only role may be selected",
            ));
        }
        if *value != policy.node_role {
            return Err(Rejection::new(
                "spec.nodeSelector.role",
                format!("must be {}", policy.node_role),
            ));
        }
    }
    if let Some(affinity) = affinity {
        check_affinity(affinity, &policy.node_role)?;
    }
    let forced = policy.node_taint.as_ref().map(NodeTaint::toleration);
    for (index, toleration) in tolerations.iter().flatten().enumerate() {
        // The one the provisioner adds (in the output of a previous validation) is replaced.
        if forced.as_ref() == Some(toleration) {
            continue;
        }
        check_toleration(toleration, &format!("spec.tolerations[{index}]"))?;
    }
    Ok(())
}

/// The cluster domain of EKS nodes' kubelets (the kubelet's default; EKS does not change it).
const CLUSTER_DOMAIN: &str = "cluster.local";
/// Longest FQDN the kubelet can make a pod's hostname (the kernel's nodename field).
const MAX_FQDN_CHARS: usize = 64;

/// With `setHostnameAsFQDN` and a subdomain, the kubelet makes
/// `<hostname>.<subdomain>.<namespace>.svc.<cluster domain>` the pod's kernel hostname and
/// fails the pod's sandbox, at every try, when that is longer than 64 characters
/// (`GetNodenameForKernel`): the pod would never start. `pod_name` is the name the pod gets.
pub(super) fn check_fqdn(spec: &PodSpec, pod_name: &str, namespace: &str) -> Result<(), Rejection> {
    let subdomain = spec.subdomain.as_deref().unwrap_or_default();
    // An override (alpha) drops the domain altogether.
    if spec.set_hostname_as_fqdn != Some(true) || subdomain.is_empty() || spec.hostname_override.is_some() {
        return Ok(());
    }
    let hostname = spec.hostname.as_deref().filter(|h| !h.is_empty()).unwrap_or(pod_name);
    let fqdn = format!("{hostname}.{subdomain}.{namespace}.svc.{CLUSTER_DOMAIN}");
    if fqdn.len() > MAX_FQDN_CHARS {
        return Err(Rejection::new(
            "spec.setHostnameAsFQDN",
            format!(
                "would make the pod's hostname {fqdn}, {} characters, more than the {MAX_FQDN_CHARS} the kernel holds: the pod would never start (shorten spec.hostname or spec.subdomain)",
                fqdn.len()
            ),
        ));
    }
    Ok(())
}

/// Node affinity only narrows the forced `role` node selector, so it is harmless, unless its
/// required terms can match no stack node at all: such a pod would stay pending forever, so
/// it is a 400 here rather than a 503 later (terms that only the current nodes rule out are
/// refused at create time, by `stacks::fit`). Pod (anti-)affinity is refused: required
/// anti-affinity on an existing pod also repels other pods, which would let one stack keep
/// others off its node.
fn check_affinity(affinity: &Affinity, node_role: &str) -> Result<(), Rejection> {
    let Affinity {
        node_affinity,
        pod_affinity,
        pod_anti_affinity,
    } = affinity;
    let required = node_affinity
        .as_ref()
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref());
    if let Some(required) = required {
        check_required_node_affinity(required, node_role)?;
    }
    let preferred = node_affinity
        .as_ref()
        .and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref());
    const PREFERRED: &str = "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution";
    for (index, term) in preferred.iter().flat_map(|p| p.iter()).enumerate() {
        if !(1..=100).contains(&term.weight) {
            return Err(Rejection::new(
                format!("{PREFERRED}[{index}].weight"),
                "must be between 1 and 100",
            ));
        }
        check_term_shape(&term.preference, &format!("{PREFERRED}[{index}].preference"))?;
    }
    forbid_if(
        pod_affinity.is_some(),
        "spec.affinity.podAffinity",
        "stacks are placed independently",
    )?;
    forbid_if(
        pod_anti_affinity.is_some(),
        "spec.affinity.podAntiAffinity",
        "stacks are placed independently",
    )
}

const REQUIRED: &str = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution";

/// The terms are ORed: the pod can be placed if one of them, together with the forced
/// `role` selector, can match some node.
fn check_required_node_affinity(required: &NodeSelector, node_role: &str) -> Result<(), Rejection> {
    if required.node_selector_terms.is_empty() {
        return Err(Rejection::new(
            format!("{REQUIRED}.nodeSelectorTerms"),
            "must list at least one term",
        ));
    }
    for (index, term) in required.node_selector_terms.iter().enumerate() {
        check_term_shape(term, &format!("{REQUIRED}.nodeSelectorTerms[{index}]"))?;
    }
    if required
        .node_selector_terms
        .iter()
        .all(|term| !term_can_match(term, node_role))
    {
        return Err(Rejection::new(
            format!("{REQUIRED}.nodeSelectorTerms"),
            format!("match no node with role={node_role}, the only nodes stacks run on"),
        ));
    }
    Ok(())
}

/// The only field a node selector term may match (the apiserver's `nodeFieldSelectorValidators`).
pub(crate) const NODE_NAME_FIELD: &str = "metadata.name";

/// What the apiserver would refuse about a term's requirements.
fn check_term_shape(term: &NodeSelectorTerm, at: &str) -> Result<(), Rejection> {
    let lists = [
        ("matchExpressions", term.match_expressions.as_deref()),
        ("matchFields", term.match_fields.as_deref()),
    ];
    for (list, requirements) in lists {
        for (index, requirement) in requirements.unwrap_or_default().iter().enumerate() {
            let at = format!("{at}.{list}[{index}]");
            let values = requirement.values.as_deref().unwrap_or_default();
            if list == "matchFields" {
                check_field_requirement(requirement, &at)?;
                continue;
            }
            let problem = match requirement.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => Some("must list values for In and NotIn"),
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    Some("must list no values for Exists and DoesNotExist")
                }
                "Gt" | "Lt" if values.len() != 1 || values[0].parse::<i64>().is_err() => {
                    Some("must list one integer value for Gt and Lt")
                }
                "In" | "NotIn" | "Exists" | "DoesNotExist" | "Gt" | "Lt" => None,
                _ => {
                    return Err(Rejection::new(
                        format!("{at}.operator"),
                        "must be In, NotIn, Exists, DoesNotExist, Gt or Lt",
                    ));
                }
            };
            if let Some(problem) = problem {
                return Err(Rejection::new(format!("{at}.values"), problem));
            }
            if requirement.key.is_empty() {
                return Err(Rejection::required(format!("{at}.key")));
            }
        }
    }
    Ok(())
}

/// `ValidateNodeFieldSelectorRequirement`: `metadata.name`, `In` or `NotIn`, one value.
fn check_field_requirement(requirement: &NodeSelectorRequirement, at: &str) -> Result<(), Rejection> {
    if requirement.key != NODE_NAME_FIELD {
        return Err(Rejection::new(
            format!("{at}.key"),
            format!("must be {NODE_NAME_FIELD}, the only field a node can be selected by"),
        ));
    }
    if !matches!(requirement.operator.as_str(), "In" | "NotIn") {
        return Err(Rejection::new(
            format!("{at}.operator"),
            "must be In or NotIn for a field",
        ));
    }
    if requirement.values.as_ref().is_none_or(|values| values.len() != 1) {
        return Err(Rejection::new(
            format!("{at}.values"),
            "must list exactly one node name",
        ));
    }
    Ok(())
}

/// Whether some node could satisfy `term` and `role=<node_role>`: the requirements of each key
/// (field requirements on their own) must leave at least one possible value. An empty term
/// matches nothing, as in Kubernetes.
pub(crate) fn term_can_match(term: &NodeSelectorTerm, node_role: &str) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    let role = NodeSelectorRequirement {
        key: "role".into(),
        operator: "In".into(),
        values: Some(vec![node_role.to_owned()]),
    };
    satisfiable(expressions.iter().chain([&role])) && satisfiable(fields.iter())
}

fn satisfiable<'r>(requirements: impl Iterator<Item = &'r NodeSelectorRequirement>) -> bool {
    let mut by_key: BTreeMap<&str, Vec<&NodeSelectorRequirement>> = BTreeMap::new();
    for requirement in requirements {
        by_key.entry(requirement.key.as_str()).or_default().push(requirement);
    }
    by_key.values().all(|requirements| key_satisfiable(requirements))
}

/// One label: `In` sets intersect, `NotIn` removes, `Gt`/`Lt` bound an integer value,
/// `DoesNotExist` excludes everything else.
fn key_satisfiable(requirements: &[&NodeSelectorRequirement]) -> bool {
    let mut allowed: Option<BTreeSet<&str>> = None;
    let mut excluded = BTreeSet::new();
    let (mut must_exist, mut must_not_exist) = (false, false);
    let (mut above, mut below) = (i64::MIN, i64::MAX);
    let mut ranged = false;
    for requirement in requirements {
        let values = requirement.values.as_deref().unwrap_or_default();
        let bound = || values.first().and_then(|v| v.parse::<i64>().ok());
        match requirement.operator.as_str() {
            "In" => {
                must_exist = true;
                let these: BTreeSet<&str> = values.iter().map(String::as_str).collect();
                allowed = Some(match allowed {
                    Some(before) => before.intersection(&these).copied().collect(),
                    None => these,
                });
            }
            "NotIn" => excluded.extend(values.iter().map(String::as_str)),
            "Exists" => must_exist = true,
            "DoesNotExist" => must_not_exist = true,
            "Gt" => {
                must_exist = true;
                ranged = true;
                above = above.max(bound().unwrap_or(i64::MAX));
            }
            "Lt" => {
                must_exist = true;
                ranged = true;
                below = below.min(bound().unwrap_or(i64::MIN));
            }
            _ => {}
        }
    }
    if must_not_exist {
        return !must_exist;
    }
    let in_range = |value: &str| !ranged || value.parse::<i64>().is_ok_and(|v| v > above && v < below);
    match allowed {
        Some(allowed) => allowed.iter().any(|v| !excluded.contains(v) && in_range(v)),
        // Any value would do, if the range has room (ignoring the rare fully excluded range).
        None => !ranged || above.checked_add(1).is_some_and(|next| next < below),
    }
}

/// The tolerations the apiserver adds to every pod (`DefaultTolerationSeconds`), as they
/// appear in `kubectl get -o yaml`: keeping them changes nothing.
fn is_default_toleration(toleration: &Toleration) -> bool {
    matches!(
        toleration.key.as_deref(),
        Some("node.kubernetes.io/not-ready" | "node.kubernetes.io/unreachable")
    ) && toleration.operator.as_deref() == Some("Exists")
        && toleration.effect.as_deref() == Some("NoExecute")
        && toleration.value.is_none()
        && toleration.toleration_seconds.is_some_and(|s| (0..=300).contains(&s))
}

/// The forced node selector already keeps the pod on stack nodes, so a toleration can only
/// matter among them. Accepted: a named, non-reserved taint with a scheduling-only effect.
/// Refused: tolerating every taint (empty key), cluster taints (`*.kubernetes.io`, e.g.
/// not-ready or unschedulable) and NoExecute, which would keep the pod on a node being drained.
fn check_toleration(toleration: &Toleration, at: &str) -> Result<(), Rejection> {
    if is_default_toleration(toleration) {
        return Ok(());
    }
    let Toleration {
        effect,
        key,
        operator: _,
        toleration_seconds,
        value: _,
    } = toleration;
    let key = key.as_deref().unwrap_or_default();
    if key.is_empty() {
        return Err(Rejection::new(
            format!("{at}.key"),
            "is required (an empty key tolerates every taint)",
        ));
    }
    let domain = key
        .split_once('/')
        .map(|(prefix, _)| prefix.to_ascii_lowercase())
        .unwrap_or_default();
    let reserved = ["kubernetes.io", "k8s.io"]
        .iter()
        .any(|d| domain == *d || domain.ends_with(&format!(".{d}")));
    if reserved {
        return Err(Rejection::forbidden_because(
            format!("{at}.key"),
            "cluster taints may not be tolerated",
        ));
    }
    if key == STARTUP_TAINT {
        return Err(Rejection::forbidden_because(
            format!("{at}.key"),
            "a node with this taint is still receiving the event's images",
        ));
    }
    if !matches!(effect.as_deref(), Some("NoSchedule" | "PreferNoSchedule")) {
        return Err(Rejection::new(
            format!("{at}.effect"),
            "must be NoSchedule or PreferNoSchedule",
        ));
    }
    if toleration_seconds.is_some() {
        return Err(Rejection::forbidden(format!("{at}.tolerationSeconds")));
    }
    Ok(())
}
