//! Container image references and the optional registry allowlist.
//!
//! Images are compared in their fully qualified form (`nginx` is `docker.io/library/nginx`), and
//! an allowlist entry matches only on a boundary: `registry.example.com/ctf/` accepts
//! `registry.example.com/ctf/web:1` but not `registry.example.com/ctf-evil/web` nor
//! `registry.example.com.evil.io/ctf/web`. An entry naming a repository
//! (`registry.example.com/ctf/web`) also accepts its tags and digests.
//!
//! Whatever the allowlist says, a registry on a loopback or link-local address (or named
//! `localhost`, or the EC2 metadata service) is refused: the kubelet pulls from the node, so
//! such a reference makes the node talk to its own services or the metadata endpoint.
//!
//! A registry on an internal address (RFC 1918, 100.64/10, IPv6 unique local) is refused unless
//! an allowlist entry names it: that is how an operator lets a private registry in the VPC
//! through (the local environment's registry is one), while a manifest cannot point the
//! node's pulls at any other host of the network.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an image was refused; the caller adds the field path.
pub(super) fn check(image: &str, allowlist: &[String]) -> Result<(), String> {
    if image.trim().is_empty() {
        return Err("is required".into());
    }
    let name = repository(image);
    let well_formed = !image.chars().any(|c| c.is_whitespace() || c.is_control())
        && name
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..");
    if !well_formed {
        return Err("is not a valid image reference".into());
    }
    if let Some(host) = registry_host(image)
        && is_node_local(host)
    {
        return Err(format!(
            "{image:?} is forbidden: its registry {host} is a loopback or link-local address of the node"
        ));
    }
    let qualified = qualify(image);
    let allowed = allowlist.iter().any(|entry| matches_entry(&qualified, entry));
    if let Some(host) = registry_host(image)
        && is_internal(host)
        && !allowed
    {
        return Err(format!(
            "{image:?} is forbidden: its registry {host} is an internal address; \
             an operator lets a private registry through by listing it in STACK_IMAGE_ALLOWLIST"
        ));
    }
    if allowlist.is_empty() || allowed {
        Ok(())
    } else {
        Err(format!(
            "{image:?} is not from an allowed registry ({})",
            allowlist.join(", ")
        ))
    }
}

/// The reference without its tag or digest.
fn repository(image: &str) -> &str {
    let name = image.split_once('@').map_or(image, |(name, _)| name);
    match (name.rfind(':'), name.rfind('/')) {
        (Some(colon), Some(slash)) if colon > slash => &name[..colon],
        (Some(colon), None) => &name[..colon],
        _ => name,
    }
}

/// Docker's defaulting: a first component without `.` or `:` (other than `localhost`) is a
/// Docker Hub user, and a single component is an official image.
fn qualify(image: &str) -> String {
    match image.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => image.to_owned(),
        Some(_) => format!("docker.io/{image}"),
        None => format!("docker.io/library/{image}"),
    }
}

/// The registry part of a reference, without its port, when it names one (Docker's rule: a
/// first component with `.` or `:`, or `localhost`).
fn registry_host(image: &str) -> Option<&str> {
    let (first, _) = image.split_once('/')?;
    if !(first.contains(['.', ':']) || first.eq_ignore_ascii_case("localhost")) {
        return None;
    }
    if let Some(bracketed) = first.strip_prefix('[') {
        return bracketed.split_once(']').map(|(host, _)| host);
    }
    Some(first.rsplit_once(':').map_or(first, |(host, _)| host))
}

fn is_node_local(host: &str) -> bool {
    // An IPv6 zone (`fe80::1%eth0`) does not change what the address is.
    let host = host.split_once('%').map_or(host, |(address, _)| address);
    let name = host.trim_end_matches('.').to_ascii_lowercase();
    if name == "localhost"
        || name.ends_with(".localhost")
        || name == "localhost.localdomain"
        || name == "instance-data"
        || name.starts_with("instance-data.")
    {
        return true;
    }
    match parse_ip(&name) {
        Some(IpAddr::V4(v4)) => v4_is_node_local(v4),
        Some(IpAddr::V6(v6)) => {
            let link_local = (v6.segments()[0] & 0xffc0) == 0xfe80;
            // fd00:ec2::254 is the EC2 metadata service over IPv6.
            let metadata = v6 == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);
            v6.is_loopback()
                || v6.is_unspecified()
                || link_local
                || metadata
                || v6.to_ipv4_mapped().is_some_and(v4_is_node_local)
        }
        None => false,
    }
}

fn v4_is_node_local(v4: Ipv4Addr) -> bool {
    v4.is_loopback() || v4.is_link_local() || v4.is_unspecified()
}

/// An address of the cluster's own network rather than of the internet.
fn is_internal(host: &str) -> bool {
    match parse_ip(host.split_once('%').map_or(host, |(address, _)| address)) {
        Some(IpAddr::V4(v4)) => v4_is_internal(v4),
        Some(IpAddr::V6(v6)) => {
            let unique_local = (v6.segments()[0] & 0xfe00) == 0xfc00;
            unique_local || v6.to_ipv4_mapped().is_some_and(v4_is_internal)
        }
        None => false,
    }
}

fn v4_is_internal(v4: Ipv4Addr) -> bool {
    let [a, b, ..] = v4.octets();
    let shared = a == 100 && (64..128).contains(&b);
    v4.is_private() || shared
}

/// An address as resolvers read it: IPv6, or IPv4 in any `inet_aton` form (`127.1`,
/// `0x7f.0.0.1`, `2130706433`), which a runtime's resolver would accept as well.
fn parse_ip(name: &str) -> Option<IpAddr> {
    if let Ok(ip) = name.parse::<IpAddr>() {
        return Some(ip);
    }
    let parts: Vec<u32> = name.split('.').map(inet_aton_part).collect::<Option<_>>()?;
    let value = match parts.as_slice() {
        [a] => *a,
        [a, b] if *a < 256 && *b < (1 << 24) => (a << 24) | b,
        [a, b, c] if *a < 256 && *b < 256 && *c < (1 << 16) => (a << 24) | (b << 16) | c,
        [a, b, c, d] if [a, b, c, d].iter().all(|p| **p < 256) => (a << 24) | (b << 16) | (c << 8) | d,
        _ => return None,
    };
    Some(IpAddr::V4(Ipv4Addr::from(value)))
}

fn inet_aton_part(part: &str) -> Option<u32> {
    if let Some(hex) = part.strip_prefix("0x") {
        u32::from_str_radix(hex, 16).ok()
    } else if part.len() > 1 && part.starts_with('0') {
        u32::from_str_radix(&part[1..], 8).ok()
    } else if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) {
        part.parse().ok()
    } else {
        None
    }
}

fn matches_entry(image: &str, entry: &str) -> bool {
    let entry = entry.trim_end_matches('/');
    let Some(rest) = image.strip_prefix(entry) else {
        return false;
    };
    // After a bare registry host, ':' would start a port, i.e. another registry.
    let names_repository = entry.contains('/');
    rest.is_empty() || rest.starts_with('/') || (names_repository && rest.starts_with([':', '@']))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(entries: &[&str]) -> Vec<String> {
        entries.iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn any_well_formed_image_passes_without_allowlist() {
        for image in [
            "nginx",
            "nginx:1.27",
            "ghcr.io/org/app@sha256:abc",
            "registry:5000/a/b:c",
            "203.0.113.5:5000/ctf/web",
            "127.example.com/x",
        ] {
            assert_eq!(check(image, &[]), Ok(()), "{image}");
        }
    }

    /// `image` is refused without an allowlist, for a reason that says `why`.
    fn assert_refused(image: &str, why: &str) {
        let err = check(image, &[]).unwrap_err();
        assert!(err.contains(why), "{image}: {err}");
    }

    #[test]
    fn node_local_registries_are_refused_even_when_allowed() {
        let images = [
            "localhost:5000/x",
            "LOCALHOST:5000/x",
            "127.0.0.1:5000/x",
            "127.1/x",
            "0x7f.0.0.1/x",
            "2130706433:80/x",
            "017700000001:80/x",
            "0.0.0.0:5000/x",
            "169.254.169.254/latest",
            "169.254.170.2:80/creds",
            "[::1]:5000/x",
            "[fe80::1]/x",
            "[::ffff:127.0.0.1]:5000/x",
            "[fd00:ec2::254]/x",
            "registry.localhost/x",
            "instance-data.ec2.internal/x",
        ];
        for image in images {
            assert_refused(image, "loopback or link-local");
            let allowed = allow(&[image.split('/').next().unwrap()]);
            assert!(check(image, &allowed).unwrap_err().contains("loopback"), "{image}");
        }
    }

    #[test]
    fn internal_registries_need_an_allowlist_entry_that_names_them() {
        let images = [
            "10.0.0.5:5000/ctf/web",
            "10.80.0.1:41234/stack-env/tcp:1",
            "172.16.3.4/x",
            "192.168.1.10:5000/x",
            "100.64.0.9/x",
            "[fd12::1]:5000/x",
            "[::ffff:10.1.2.3]/x",
            "0x0a000005:5000/x",
        ];
        for image in images {
            assert_refused(image, "internal address");
            let registry = image.split('/').next().unwrap();
            assert_eq!(check(image, &allow(&[&format!("{registry}/")])), Ok(()), "{image}");
            // An entry for another registry does not let it through.
            let err = check(image, &allow(&["registry.example.com/"])).unwrap_err();
            assert!(err.contains("internal address"), "{image}: {err}");
        }
        // Public addresses and names are not internal.
        for image in [
            "172.32.0.1/x",
            "100.128.0.1/x",
            "11.0.0.1/x",
            "registry.internal.example/x",
        ] {
            assert_eq!(check(image, &[]), Ok(()), "{image}");
        }
    }

    #[test]
    fn malformed_images_fail() {
        assert_eq!(check("", &[]), Err("is required".into()));
        assert_eq!(check("  ", &[]), Err("is required".into()));
        for image in ["a b", "reg.io//x", "reg.io/ctf/../evil", "reg.io/./x", "x\n", "/x"] {
            assert_eq!(
                check(image, &[]),
                Err("is not a valid image reference".into()),
                "{image:?}"
            );
        }
    }

    #[test]
    fn allowlist_matches_on_boundaries() {
        let list = allow(&[
            "registry.example.com/ctf/",
            "docker.io/library/",
            "ghcr.io/org/app",
            "quay.io",
        ]);
        let accepted = [
            "registry.example.com/ctf/web:1",
            "registry.example.com/ctf/team/web@sha256:00",
            "nginx",
            "nginx:1.27",
            "docker.io/library/redis",
            "ghcr.io/org/app",
            "ghcr.io/org/app:v2",
            "ghcr.io/org/app@sha256:00",
            "ghcr.io/org/app/sub",
            "quay.io/any/thing",
        ];
        for image in accepted {
            assert_eq!(check(image, &list), Ok(()), "{image}");
        }
        let refused = [
            "registry.example.com/ctf-evil/web",
            "registry.example.com.evil.io/ctf/web",
            "registry.example.com/ctfweb",
            "registry.example.com:5000/ctf/web",
            "evil.io/registry.example.com/ctf/web",
            "someuser/nginx",
            "ghcr.io/org/application",
            "quay.io:443/x",
            "quay.iox/y",
        ];
        for image in refused {
            let err = check(image, &list).unwrap_err();
            assert!(err.contains("not from an allowed registry"), "{image}: {err}");
        }
    }
}
