//! The readiness a manifest left out. A stack is `running` when its pod is Ready, and a
//! container without a probe is Ready the moment its process starts, before it listens: a
//! participant told `running` could meet "connection refused". So a container that exposes a
//! TCP target port and declares neither a readiness nor a startup probe gets a `tcpSocket`
//! readiness probe on its first such port (the order of `target_port`).
//!
//! Readiness, not a startup probe: the kubelet runs a readiness probe the moment it sees the
//! container running, while a startup probe waits for its next tick (up to a period after the
//! start). A TCP probe needs only the kernel's handshake, so a busy single-threaded challenge
//! passes; a fork-per-connection one forks a handler that reads EOF, every `PERIOD_SECS`
//! for the stack's life.
//!
//! Under a sandboxed runtime (`STACK_RUNTIME_CLASS`, e.g. gVisor) the probe is a startup probe
//! instead: it stops at its first success, since every connection costs the sandbox's own
//! kernel a fork it does far more slowly than the node's. Measured here, gVisor on systrap, 25
//! stacks at once: the readiness probe's connections took the sandboxes ~50 ms of CPU a second
//! each, and 15 of 25 participants waited more than 5 s for their banner after `running`.
//! The kubelet's source address is its node's, which EKS's network policy agent and kube-router
//! both let through whatever the isolation policy says. UDP ports cannot be probed this way.

use k8s_openapi::api::core::v1::{Container, Probe, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::ports::declared_ports;
use crate::model::{Protocol, TargetPort};

/// How often a failed or passed probe is tried again: a challenge that listens late is
/// `running` at most this long after it does. 2 s cost 25 stacks at once 1.1-2 s at p50 (the
/// first probe, at the container's start, often beat the challenge's `listen`).
const PERIOD_SECS: i32 = 1;
/// Failed probes in a row before a Ready stack counts as not answering (10 s).
const FAILURE_THRESHOLD: i32 = 10;
/// A startup probe that fails this often restarts the container: an hour of not listening,
/// long after any start deadline has failed the stack.
const STARTUP_FAILURE_THRESHOLD: i32 = 3600;

/// Gives each container of `containers` that exposes a TCP target port and has no readiness
/// or startup probe a TCP probe on the first of them: a readiness probe, or a startup probe
/// when the pod runs `sandboxed`.
pub(super) fn probe_target_ports(containers: &mut [Container], target_ports: &[TargetPort], sandboxed: bool) {
    for container in containers
        .iter_mut()
        .filter(|c| c.readiness_probe.is_none() && c.startup_probe.is_none())
    {
        if let Some(port) = target_ports
            .iter()
            .filter(|port| port.protocol == Protocol::Tcp)
            .find(|port| {
                declared_ports(container)
                    .any(|declared| declared == (i32::from(port.container_port), Protocol::Tcp.as_str()))
            })
        {
            let probe = tcp_probe(port.container_port);
            if sandboxed {
                container.startup_probe = Some(Probe {
                    failure_threshold: Some(STARTUP_FAILURE_THRESHOLD),
                    ..probe
                });
            } else {
                container.readiness_probe = Some(probe);
            }
        }
    }
}

fn tcp_probe(port: u16) -> Probe {
    Probe {
        tcp_socket: Some(TCPSocketAction {
            host: None,
            port: IntOrString::Int(i32::from(port)),
        }),
        period_seconds: Some(PERIOD_SECS),
        timeout_seconds: Some(1),
        failure_threshold: Some(FAILURE_THRESHOLD),
        ..Probe::default()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ContainerPort, ExecAction};

    use super::*;

    fn container(name: &str, ports: &[(i32, Option<&str>)]) -> Container {
        Container {
            name: name.to_owned(),
            ports: Some(
                ports
                    .iter()
                    .map(|(port, protocol)| ContainerPort {
                        container_port: *port,
                        protocol: protocol.map(str::to_owned),
                        ..ContainerPort::default()
                    })
                    .collect(),
            ),
            ..Container::default()
        }
    }

    fn target(port: u16, protocol: Protocol) -> TargetPort {
        TargetPort {
            container_port: port,
            protocol,
        }
    }

    fn probed_port(container: &Container) -> Option<i32> {
        match &container.readiness_probe.as_ref()?.tcp_socket.as_ref()?.port {
            IntOrString::Int(port) => Some(*port),
            IntOrString::String(_) => None,
        }
    }

    #[test]
    fn each_container_is_probed_on_its_first_tcp_target_port() {
        let mut containers = vec![
            container("udp-then-tcp", &[(53, Some("UDP")), (9000, None), (9001, Some("TCP"))]),
            container("web", &[(8080, None)]),
            container("sidecar", &[(9100, None)]),
        ];
        let targets = [
            target(53, Protocol::Udp),
            target(9001, Protocol::Tcp),
            target(9000, Protocol::Tcp),
            target(8080, Protocol::Tcp),
        ];
        probe_target_ports(&mut containers, &targets, false);
        let probed: Vec<_> = containers.iter().map(probed_port).collect();
        // The target ports' order decides, a container exposing none is left alone.
        assert_eq!(probed, [Some(9001), Some(8080), None]);
        let probe = containers[1].readiness_probe.as_ref().unwrap();
        assert_eq!(
            (
                probe.period_seconds,
                probe.failure_threshold,
                probe.initial_delay_seconds
            ),
            (Some(PERIOD_SECS), Some(FAILURE_THRESHOLD), None)
        );
    }

    #[test]
    fn a_declared_probe_is_the_authors_and_udp_is_not_probed() {
        let own = Probe {
            exec: Some(ExecAction {
                command: Some(vec!["/healthy".to_owned()]),
            }),
            ..Probe::default()
        };
        let mut ready = container("ready", &[(8080, None)]);
        ready.readiness_probe = Some(own.clone());
        let mut started = container("started", &[(8080, None)]);
        started.startup_probe = Some(own.clone());
        let mut containers = vec![ready, started, container("udp", &[(8080, Some("UDP"))])];
        probe_target_ports(
            &mut containers,
            &[target(8080, Protocol::Tcp), target(8080, Protocol::Udp)],
            false,
        );
        assert_eq!(containers[0].readiness_probe.as_ref(), Some(&own));
        assert_eq!(containers[1].readiness_probe, None, "its startup probe gates Ready");
        assert_eq!(containers[2].readiness_probe, None, "8080/UDP only");
    }

    #[test]
    fn a_sandboxed_pod_is_probed_until_it_first_answers_and_never_again() {
        let mut containers = vec![container("web", &[(8080, None)])];
        probe_target_ports(&mut containers, &[target(8080, Protocol::Tcp)], true);
        assert_eq!(containers[0].readiness_probe, None);
        let probe = containers[0].startup_probe.as_ref().expect("a startup probe");
        let port = probe.tcp_socket.as_ref().map(|t| t.port.clone());
        assert_eq!(port, Some(IntOrString::Int(8080)));
        assert_eq!(probe.period_seconds, Some(PERIOD_SECS));
        // Failing probes restart a container that never listens, but only long after its start.
        assert!(probe.failure_threshold.unwrap_or(3) * probe.period_seconds.unwrap_or(10) >= 3600);
    }
}
