//! Rules for each container and init container. Every field of `Container` is named below (no
//! `..`), so a new field in an upgraded k8s-openapi fails to compile until it is decided.
//! Resources are checked by the `resources` module.

use k8s_openapi::api::core::v1::{
    Container, HTTPGetAction, LifecycleHandler, PodSpec, Probe, TCPSocketAction, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::rejection::{ContainerPath, forbid_if};
use super::{MAX_TERMINATION_GRACE_SECS, Rejection, ValidationPolicy, images, security_context};

/// Longest probe delay, period or timeout accepted: anything longer is no probe at all.
pub(super) const MAX_PROBE_SECONDS: i64 = 3600;
/// Most consecutive probe results a threshold may ask for.
pub(super) const MAX_PROBE_THRESHOLD: i64 = 100;

pub(super) fn check(spec: &PodSpec, policy: &ValidationPolicy) -> Result<(), Rejection> {
    if spec.containers.is_empty() {
        return Err(Rejection::new("spec.containers", "must list at least one container"));
    }
    for (at, container) in ContainerPath::every(spec) {
        check_container(container, at, policy)?;
    }
    Ok(())
}

fn check_container(container: &Container, at: ContainerPath, policy: &ValidationPolicy) -> Result<(), Rejection> {
    let Container {
        args: _,
        command: _,
        // Values may come from the stack namespace's ConfigMaps/Secrets or the pod's own fields.
        env: _,
        env_from: _,
        image,
        image_pull_policy: _,
        lifecycle,
        liveness_probe,
        name,
        ports,
        readiness_probe,
        // Only applies when someone with API access resizes the pod.
        resize_policy: _,
        resources: _,
        restart_policy,
        restart_policy_rules,
        security_context,
        startup_probe,
        stdin: _,
        stdin_once: _,
        termination_message_path: _,
        termination_message_policy: _,
        tty: _,
        volume_devices,
        volume_mounts,
        working_dir: _,
    } = container;

    if name.is_empty() {
        return Err(Rejection::required(at.field("name")));
    }
    images::check(image.as_deref().unwrap_or_default(), &policy.image_allowlist)
        .map_err(|problem| Rejection::new(at.field("image"), problem))?;
    // Only what hardens the container; `harden` merges it with the forced settings.
    if let Some(context) = security_context {
        security_context::check_container(context, &at.field("securityContext"), &policy.add_back_capabilities)?;
    }
    if volume_devices.is_some() {
        return Err(Rejection::forbidden_because(
            at.field("volumeDevices"),
            "stacks get no block devices",
        ));
    }
    check_restart_policy(restart_policy.as_deref(), restart_policy_rules.is_some(), at)?;
    if at.init && ports.is_some() {
        return Err(Rejection::forbidden_because(
            at.field("ports"),
            "only regular containers expose ports",
        ));
    }
    for (index, port) in ports.iter().flatten().enumerate() {
        let port_at = at.field(&format!("ports[{index}]"));
        if port.host_port.is_some() {
            return Err(Rejection::forbidden_because(
                format!("{port_at}.hostPort"),
                "it binds a port of the node",
            ));
        }
        if port.host_ip.is_some() {
            return Err(Rejection::forbidden_because(
                format!("{port_at}.hostIP"),
                "it binds an address of the node",
            ));
        }
        if !(1..=65535).contains(&port.container_port) {
            return Err(Rejection::new(
                format!("{port_at}.containerPort"),
                "must be between 1 and 65535",
            ));
        }
    }
    for (index, mount) in volume_mounts.iter().flatten().enumerate() {
        check_mount(mount, &at.field(&format!("volumeMounts[{index}]")))?;
    }
    let port_names: Vec<&str> = ports.iter().flatten().filter_map(|p| p.name.as_deref()).collect();
    for (field, probe) in [
        ("livenessProbe", liveness_probe),
        ("readinessProbe", readiness_probe),
        ("startupProbe", startup_probe),
    ] {
        if let Some(probe) = probe {
            check_probe(probe, &port_names, &at.field(field))?;
        }
    }
    if let Some(lifecycle) = lifecycle {
        for (field, handler) in [("postStart", &lifecycle.post_start), ("preStop", &lifecycle.pre_stop)] {
            if let Some(handler) = handler {
                check_handler(handler, &port_names, &at.field(&format!("lifecycle.{field}")))?;
            }
        }
    }
    Ok(())
}

/// Init containers may be sidecars (`Always`); per-container restart rules on regular
/// containers are an alpha feature that would override the forced `restartPolicy: Never`.
fn check_restart_policy(policy: Option<&str>, has_rules: bool, at: ContainerPath) -> Result<(), Rejection> {
    if has_rules {
        return Err(Rejection::forbidden(at.field("restartPolicyRules")));
    }
    match (at.init, policy) {
        (_, None) | (true, Some("Always")) => Ok(()),
        (true, Some(_)) => Err(Rejection::new(
            at.field("restartPolicy"),
            "must be Always (a sidecar) or unset",
        )),
        (false, Some(_)) => Err(Rejection::forbidden_because(
            at.field("restartPolicy"),
            "the pod's restartPolicy applies",
        )),
    }
}

/// `Bidirectional` propagation needs a privileged container; `subPathExpr` builds host paths
/// from variables and was the vehicle of past subpath escapes; `..` in `subPath` likewise.
fn check_mount(mount: &VolumeMount, at: &str) -> Result<(), Rejection> {
    if mount.mount_propagation.as_deref() == Some("Bidirectional") {
        return Err(Rejection::forbidden_because(
            format!("{at}.mountPropagation"),
            "Bidirectional needs a privileged container",
        ));
    }
    if mount.sub_path_expr.is_some() {
        return Err(Rejection::forbidden_because(format!("{at}.subPathExpr"), "use subPath"));
    }
    if let Some(sub_path) = &mount.sub_path
        && (sub_path.starts_with('/') || sub_path.split('/').any(|part| part == ".."))
    {
        return Err(Rejection::new(
            format!("{at}.subPath"),
            "must be a relative path without '..'",
        ));
    }
    Ok(())
}

/// Every duration and count of a probe is bounded; its own grace period like the pod's.
fn check_probe(probe: &Probe, port_names: &[&str], at: &str) -> Result<(), Rejection> {
    reject_host(probe.http_get.as_ref(), probe.tcp_socket.as_ref(), at)?;
    let target_port = [
        ("httpGet", probe.http_get.as_ref().map(|a| &a.port)),
        ("tcpSocket", probe.tcp_socket.as_ref().map(|a| &a.port)),
    ];
    check_named_ports(&target_port, port_names, at)?;
    // One row per field: (name, value, least, most).
    #[rustfmt::skip]
    let bounded = [
        ("initialDelaySeconds", probe.initial_delay_seconds.map(i64::from), 0, MAX_PROBE_SECONDS),
        ("periodSeconds", probe.period_seconds.map(i64::from), 0, MAX_PROBE_SECONDS),
        ("timeoutSeconds", probe.timeout_seconds.map(i64::from), 0, MAX_PROBE_SECONDS),
        ("successThreshold", probe.success_threshold.map(i64::from), 0, MAX_PROBE_THRESHOLD),
        ("failureThreshold", probe.failure_threshold.map(i64::from), 0, MAX_PROBE_THRESHOLD),
        ("terminationGracePeriodSeconds", probe.termination_grace_period_seconds, 1, MAX_TERMINATION_GRACE_SECS),
    ];
    for (field, value, min, max) in bounded {
        if value.is_some_and(|v| !(min..=max).contains(&v)) {
            return Err(Rejection::new(
                format!("{at}.{field}"),
                format!("must be between {min} and {max}"),
            ));
        }
    }
    Ok(())
}

/// A `sleep` hook longer than the grace period would only be cut short by the kubelet.
/// `tcpSocket` is accepted by the apiserver for compatibility only: the kubelet fails such a
/// hook every time (and kills the container when it is a postStart hook).
fn check_handler(handler: &LifecycleHandler, port_names: &[&str], at: &str) -> Result<(), Rejection> {
    reject_host(handler.http_get.as_ref(), handler.tcp_socket.as_ref(), at)?;
    forbid_if(
        handler.tcp_socket.is_some(),
        format!("{at}.tcpSocket"),
        "the kubelet does not run tcpSocket hooks, it fails them",
    )?;
    check_named_ports(
        &[("httpGet", handler.http_get.as_ref().map(|a| &a.port))],
        port_names,
        at,
    )?;
    if let Some(sleep) = &handler.sleep
        && !(0..=MAX_TERMINATION_GRACE_SECS).contains(&sleep.seconds)
    {
        return Err(Rejection::new(
            format!("{at}.sleep.seconds"),
            format!("must be between 0 and {MAX_TERMINATION_GRACE_SECS}"),
        ));
    }
    Ok(())
}

/// The kubelet looks a named port up among the container's own `ports` only (and a probe's as
/// a number after that): a name it cannot find errors the probe or hook every time. A
/// readiness or startup probe then never passes, so the pod is never Ready; a postStart hook
/// kills the container; a liveness probe or preStop hook silently never runs.
fn check_named_ports(
    target_port: &[(&str, Option<&IntOrString>)],
    port_names: &[&str],
    at: &str,
) -> Result<(), Rejection> {
    for (action, port) in target_port {
        if let Some(IntOrString::String(name)) = port
            && name.parse::<i32>().is_err()
            && !port_names.contains(&name.as_str())
        {
            return Err(Rejection::new(
                format!("{at}.{action}.port"),
                format!(
                    "names no port of this container ({name:?}): the kubelet looks port names up only in the container's own ports, so it could never run this"
                ),
            ));
        }
    }
    Ok(())
}

/// The kubelet runs probes and hooks from the node's network, so a `host` would let the
/// manifest make the node reach any address.
fn reject_host(
    http_get: Option<&HTTPGetAction>,
    tcp_socket: Option<&TCPSocketAction>,
    at: &str,
) -> Result<(), Rejection> {
    let target_host = [
        ("httpGet", http_get.and_then(|a| a.host.as_ref())),
        ("tcpSocket", tcp_socket.and_then(|a| a.host.as_ref())),
    ];
    match target_host.iter().find(|(_, host)| host.is_some()) {
        Some((action, _)) => Err(Rejection::forbidden_because(
            format!("{at}.{action}.host"),
            "probes and hooks may only target the pod",
        )),
        None => Ok(()),
    }
}
