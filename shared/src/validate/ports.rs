//! The request's target ports: their own shape, and that the pod declares each of them.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::Container;

use super::Rejection;
use crate::model::{Protocol, TargetPort};

pub(crate) const MAX_TARGET_PORTS: usize = 24;

/// 1 to 24 ports, each in 1..=65535, no (port, protocol) twice.
pub(crate) fn validate_target_ports(ports: &[TargetPort]) -> Result<(), Rejection> {
    if ports.is_empty() || ports.len() > MAX_TARGET_PORTS {
        return Err(Rejection::new(
            "target_port",
            format!("must list 1 to {MAX_TARGET_PORTS} ports"),
        ));
    }
    let mut seen = HashSet::new();
    for (index, port) in ports.iter().enumerate() {
        if port.container_port == 0 {
            return Err(Rejection::new(
                format!("target_port[{index}].container_port"),
                "must be between 1 and 65535",
            ));
        }
        if !seen.insert((port.container_port, port.protocol)) {
            return Err(Rejection::new(
                format!("target_port[{index}]"),
                format!("repeats {}/{}", port.container_port, port.protocol),
            ));
        }
    }
    Ok(())
}

/// Each target port must be a `containerPort` of a regular container with the same protocol
/// (TCP when unset): the Service can only reach what a container listens on.
pub(super) fn check_declared(ports: &[TargetPort], containers: &[Container]) -> Result<(), Rejection> {
    let declared: HashSet<(i32, &str)> = containers.iter().flat_map(declared_ports).collect();
    for (index, port) in ports.iter().enumerate() {
        if !declared.contains(&(i32::from(port.container_port), port.protocol.as_str())) {
            return Err(Rejection::new(
                format!("target_port[{index}]"),
                format!(
                    "{}/{} is not a containerPort of any container",
                    port.container_port, port.protocol
                ),
            ));
        }
    }
    Ok(())
}

/// The ports `container` declares, with their protocol (TCP when unset).
pub(super) fn declared_ports(container: &Container) -> impl Iterator<Item = (i32, &str)> {
    container.ports.iter().flatten().map(|p| {
        (
            p.container_port,
            p.protocol.as_deref().unwrap_or(Protocol::Tcp.as_str()),
        )
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ContainerPort;

    use super::*;

    fn tcp(port: u16) -> TargetPort {
        TargetPort {
            container_port: port,
            protocol: Protocol::Tcp,
        }
    }

    fn udp(port: u16) -> TargetPort {
        TargetPort {
            container_port: port,
            protocol: Protocol::Udp,
        }
    }

    #[test]
    fn target_port_shape() {
        let too_many: Vec<TargetPort> = (1..=25).map(tcp).collect();
        let cases: Vec<(Vec<TargetPort>, Result<(), &str>)> = vec![
            (vec![tcp(80)], Ok(())),
            (vec![tcp(1), tcp(65535), udp(65535)], Ok(())),
            (too_many[..24].to_vec(), Ok(())),
            (vec![tcp(53), udp(53)], Ok(())),
            (vec![], Err("target_port must list 1 to 24 ports")),
            (too_many, Err("target_port must list 1 to 24 ports")),
            (
                vec![tcp(80), tcp(0)],
                Err("target_port[1].container_port must be between 1 and 65535"),
            ),
            (vec![udp(53), tcp(80), udp(53)], Err("target_port[2] repeats 53/UDP")),
        ];
        for (ports, want) in cases {
            let got = validate_target_ports(&ports).map_err(|r| r.to_string());
            assert_eq!(got, want.map_err(str::to_owned), "{ports:?}");
        }
    }

    #[test]
    fn target_ports_must_be_declared_with_their_protocol() {
        let port = |n: i32, protocol: Option<&str>| ContainerPort {
            container_port: n,
            protocol: protocol.map(str::to_owned),
            ..Default::default()
        };
        let containers = vec![
            Container {
                name: "web".into(),
                ports: Some(vec![port(80, None)]),
                ..Default::default()
            },
            Container {
                name: "dns".into(),
                ports: Some(vec![port(53, Some("UDP")), port(8080, Some("TCP"))]),
                ..Default::default()
            },
        ];
        assert_eq!(check_declared(&[tcp(80), udp(53), tcp(8080)], &containers), Ok(()));
        let r = check_declared(&[tcp(80), tcp(53)], &containers).unwrap_err();
        assert_eq!(
            r.to_string(),
            "target_port[1] 53/TCP is not a containerPort of any container"
        );
        let r = check_declared(&[udp(80)], &containers).unwrap_err();
        assert_eq!(
            r.to_string(),
            "target_port[0] 80/UDP is not a containerPort of any container"
        );
    }
}
