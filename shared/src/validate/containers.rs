//! Rules for each container and init container. Every field of `Container` is named below (no
//! `..`), so a new field in an upgraded k8s-openapi fails to compile until it is decided.
//! Resources are checked by the `resources` module.

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, PodSpec, Probe, VolumeMount};

use super::rejection::ContainerPath;
use super::{Rejection, ValidationPolicy, images};

pub fn check(spec: &PodSpec, policy: &ValidationPolicy) -> Result<(), Rejection> {
    if spec.containers.is_empty() {
        return Err(Rejection::new("spec.containers", "must list at least one container"));
    }
    for (index, container) in spec.init_containers.iter().flatten().enumerate() {
        check_container(container, ContainerPath { init: true, index }, policy)?;
    }
    for (index, container) in spec.containers.iter().enumerate() {
        check_container(container, ContainerPath { init: false, index }, policy)?;
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
    if security_context.is_some() {
        return Err(Rejection::forbidden_because(
            at.field("securityContext"),
            "it is set by the provisioner",
        ));
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
    for (field, probe) in [
        ("livenessProbe", liveness_probe),
        ("readinessProbe", readiness_probe),
        ("startupProbe", startup_probe),
    ] {
        if let Some(probe) = probe {
            check_probe(probe, &at.field(field))?;
        }
    }
    if let Some(lifecycle) = lifecycle {
        for (field, handler) in [("postStart", &lifecycle.post_start), ("preStop", &lifecycle.pre_stop)] {
            if let Some(handler) = handler {
                check_handler(handler, &at.field(&format!("lifecycle.{field}")))?;
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

fn check_probe(probe: &Probe, at: &str) -> Result<(), Rejection> {
    let target_host = [
        ("httpGet", probe.http_get.as_ref().and_then(|a| a.host.as_ref())),
        ("tcpSocket", probe.tcp_socket.as_ref().and_then(|a| a.host.as_ref())),
    ];
    reject_host(&target_host, at)
}

fn check_handler(handler: &LifecycleHandler, at: &str) -> Result<(), Rejection> {
    let target_host = [
        ("httpGet", handler.http_get.as_ref().and_then(|a| a.host.as_ref())),
        ("tcpSocket", handler.tcp_socket.as_ref().and_then(|a| a.host.as_ref())),
    ];
    reject_host(&target_host, at)
}

/// The kubelet runs probes and hooks from the node's network, so a `host` would let the
/// manifest make the node reach any address.
fn reject_host(target_host: &[(&str, Option<&String>)], at: &str) -> Result<(), Rejection> {
    match target_host.iter().find(|(_, host)| host.is_some()) {
        Some((action, _)) => Err(Rejection::forbidden_because(
            format!("{at}.{action}.host"),
            "probes and hooks may only target the pod",
        )),
        None => Ok(()),
    }
}
