//! Container image references and the optional registry allowlist.
//!
//! Images are compared in their fully qualified form (`nginx` is `docker.io/library/nginx`), and
//! an allowlist entry matches only on a boundary: `registry.example.com/ctf/` accepts
//! `registry.example.com/ctf/web:1` but not `registry.example.com/ctf-evil/web` nor
//! `registry.example.com.evil.io/ctf/web`. An entry naming a repository
//! (`registry.example.com/ctf/web`) also accepts its tags and digests.

/// Why an image was refused; the caller adds the field path.
pub fn check(image: &str, allowlist: &[String]) -> Result<(), String> {
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
    if allowlist.is_empty() {
        return Ok(());
    }
    let qualified = qualify(image);
    if allowlist.iter().any(|entry| matches_entry(&qualified, entry)) {
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
            "localhost:5000/x",
            "registry:5000/a/b:c",
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
