//! Pod-level `spec` fields. Every field of `PodSpec` is named below (no `..`), so a new field in
//! an upgraded k8s-openapi fails to compile until someone decides whether it is safe.
//! Containers, volumes and resources have their own modules.

use k8s_openapi::api::core::v1::{Affinity, PodSpec, Toleration};

use super::{Rejection, ValidationPolicy};

/// Longest `terminationGracePeriodSeconds` accepted: a longer one would hold the pod (and its
/// node port) long after the stack was deleted.
pub const MAX_TERMINATION_GRACE_SECS: i64 = 30;

pub fn check(spec: &PodSpec, policy: &ValidationPolicy) -> Result<(), Rejection> {
    let PodSpec {
        active_deadline_seconds,
        affinity,
        automount_service_account_token,
        containers: _,
        // Resolver settings only change which DNS server the pod itself asks.
        dns_config: _,
        dns_policy: _,
        enable_service_links,
        ephemeral_containers,
        // Entries in the pod's own /etc/hosts.
        host_aliases: _,
        host_ipc,
        host_network,
        host_pid,
        host_users,
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
        readiness_gates: _,
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

    for (field, value) in [
        ("hostNetwork", host_network),
        ("hostPID", host_pid),
        ("hostIPC", host_ipc),
    ] {
        if *value == Some(true) {
            return Err(Rejection::forbidden_because(
                format!("spec.{field}"),
                "it shares a namespace with the node",
            ));
        }
    }
    if *host_users == Some(true) {
        return Err(Rejection::forbidden_because(
            "spec.hostUsers",
            "only false (a user namespace) is allowed",
        ));
    }
    let forbidden = [
        (
            "securityContext",
            security_context.is_some(),
            "it is set by the provisioner",
        ),
        (
            "serviceAccount",
            service_account.is_some(),
            "stacks run without a service account",
        ),
        (
            "serviceAccountName",
            service_account_name.is_some(),
            "stacks run without a service account",
        ),
        ("nodeName", node_name.is_some(), "it bypasses the scheduler"),
        (
            "schedulerName",
            scheduler_name.is_some(),
            "stacks use the default scheduler",
        ),
        (
            "runtimeClassName",
            runtime_class_name.is_some(),
            "stacks use the default runtime",
        ),
        ("overhead", overhead.is_some(), "it is set by the cluster"),
        ("priority", priority.is_some(), "stacks may not preempt other pods"),
        (
            "priorityClassName",
            priority_class_name.is_some(),
            "stacks may not preempt other pods",
        ),
        (
            "preemptionPolicy",
            preemption_policy.is_some(),
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
    ];
    if let Some((field, _, why)) = forbidden.iter().find(|(_, set, _)| *set) {
        return Err(Rejection::forbidden_because(format!("spec.{field}"), why));
    }
    if *automount_service_account_token == Some(true) {
        return Err(Rejection::forbidden_because(
            "spec.automountServiceAccountToken",
            "stacks get no API token",
        ));
    }
    if *enable_service_links == Some(true) {
        return Err(Rejection::forbidden_because(
            "spec.enableServiceLinks",
            "it would expose other stacks' services",
        ));
    }
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
        check_affinity(affinity)?;
    }
    for (index, toleration) in tolerations.iter().flatten().enumerate() {
        check_toleration(toleration, &format!("spec.tolerations[{index}]"))?;
    }
    Ok(())
}

/// Node affinity only narrows the forced `role` node selector, so it is harmless. Pod
/// (anti-)affinity is refused: required anti-affinity on an existing pod also repels other
/// pods, which would let one stack keep others off its node.
fn check_affinity(affinity: &Affinity) -> Result<(), Rejection> {
    let Affinity {
        node_affinity: _,
        pod_affinity,
        pod_anti_affinity,
    } = affinity;
    if pod_affinity.is_some() {
        return Err(Rejection::forbidden_because(
            "spec.affinity.podAffinity",
            "stacks are placed independently",
        ));
    }
    if pod_anti_affinity.is_some() {
        return Err(Rejection::forbidden_because(
            "spec.affinity.podAntiAffinity",
            "stacks are placed independently",
        ));
    }
    Ok(())
}

/// The forced node selector already keeps the pod on stack nodes, so a toleration can only
/// matter among them. Accepted: a named, non-reserved taint with a scheduling-only effect.
/// Refused: tolerating every taint (empty key), cluster taints (`*.kubernetes.io`, e.g.
/// not-ready or unschedulable) and NoExecute, which would keep the pod on a node being drained.
fn check_toleration(toleration: &Toleration, at: &str) -> Result<(), Rejection> {
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
