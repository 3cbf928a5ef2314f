//! Image names (pure): the images a pod runs, and the images a node holds as its kubelet lists
//! them in its status. The kubelet lists the largest images first and at most
//! `nodeStatusMaxImages` (50 by default) of them, so a missing name says "not known", not
//! "absent".

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Node, Pod};

/// Every image `pod` runs, init containers (the isolation check's) included.
pub(crate) fn pod_images(pod: &Pod) -> impl Iterator<Item = &String> {
    pod.spec
        .iter()
        .flat_map(|spec| spec.containers.iter().chain(spec.init_containers.iter().flatten()))
        .filter_map(|c| c.image.as_ref())
}

/// Every name the kubelet lists for each image of `node` (tags and digests).
pub(crate) fn image_names(node: &Node) -> BTreeSet<String> {
    node.status
        .as_ref()
        .and_then(|s| s.images.as_ref())
        .map(|images| images.iter().flat_map(|i| i.names.iter().flatten().cloned()).collect())
        .unwrap_or_default()
}

/// Whether `names` (as [`image_names`] reads them) hold `image` as a manifest names it
/// (`busybox` is `docker.io/library/busybox:latest`).
pub(crate) fn holds_image(names: &BTreeSet<String>, image: &str) -> bool {
    let tagged = if image
        .rsplit('/')
        .next()
        .is_some_and(|last| last.contains(':') || last.contains('@'))
    {
        image.to_owned()
    } else {
        format!("{image}:latest")
    };
    let docker_hub = match tagged.split_once('/') {
        None => format!("docker.io/library/{tagged}"),
        Some((first, _)) if !first.contains('.') && !first.contains(':') && first != "localhost" => {
            format!("docker.io/{tagged}")
        }
        Some(_) => tagged.clone(),
    };
    names.contains(image) || names.contains(&tagged) || names.contains(&docker_hub)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_match_as_the_kubelet_names_them() {
        let names: BTreeSet<String> = ["docker.io/library/busybox:latest", "registry.example/x@sha256:ab"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        assert!(holds_image(&names, "busybox"));
        assert!(holds_image(&names, "docker.io/library/busybox:latest"));
        assert!(holds_image(&names, "registry.example/x@sha256:ab"));
        assert!(!holds_image(&names, "busybox:1.36"));
        assert!(!holds_image(&names, "registry.example/x:1"));
    }
}
