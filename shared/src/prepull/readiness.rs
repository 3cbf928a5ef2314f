//! Which stack nodes hold which images (pure): read from the pre-pull pods' container
//! statuses, for `/prepull`, `/stats`, the dashboard and the startup taint.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;

use super::state::{ImageFailure, PrepullState};
use crate::cluster::{ImagePull, image_pull};
use crate::model::Failure;

/// The go/no-go of the images on the stack nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Readiness {
    /// Every image is on every stack node, and none failed.
    pub go: bool,
    /// One line: `all 14 images on 12/12 nodes`, or what is missing.
    pub summary: String,
    /// Stack nodes that are up (joining ones included).
    pub nodes: usize,
    pub images: Vec<ImageReadiness>,
    /// Nodes holding every image (the startup taint comes off these).
    #[serde(skip)]
    pub complete_nodes: BTreeSet<String>,
}

/// One image across the stack nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ImageReadiness {
    pub image: String,
    /// Nodes that hold it.
    pub ready: usize,
    /// Nodes still pulling it (or waiting to).
    pub pulling: Vec<String>,
    /// The last pull error of a node still retrying (registry unreachable, rate limited).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retrying: Option<String>,
    /// Why it cannot be pulled: it is left out until declared again or an hour has passed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<ImageFailure>,
}

/// A definite pull failure seen on a node this time.
pub(crate) struct NewFailure {
    pub image: String,
    pub node: String,
    pub failure: Failure,
}

/// Reads where each of `shown` stands on each of `nodes`, from the pre-pull `pods` only: the
/// images a kubelet lists in its node's status can be half a minute old, and an image removed
/// meanwhile would read as there; a running container of the image cannot. Images in
/// `state.failed` are reported failed.
pub(crate) fn readiness(
    shown: &BTreeSet<String>,
    state: &PrepullState,
    nodes: &[String],
    pods: &[Pod],
) -> (Readiness, Vec<NewFailure>) {
    let pulls = pulls_by_node(pods);
    let mut new_failures = Vec::new();
    let mut complete: BTreeSet<String> = nodes.iter().cloned().collect();
    let mut report = Vec::new();
    for image in shown {
        let mut entry = ImageReadiness {
            image: image.clone(),
            ready: 0,
            pulling: Vec::new(),
            retrying: None,
            failed: state.failed.get(image).cloned(),
        };
        if entry.failed.is_some() {
            report.push(entry);
            continue;
        }
        for node in nodes {
            match pulls.get(&(node.as_str(), image.as_str())) {
                Some(ImagePull::Present) => {
                    entry.ready += 1;
                    continue;
                }
                Some(ImagePull::Failed(failure)) => new_failures.push(NewFailure {
                    image: image.clone(),
                    node: node.clone(),
                    failure: failure.clone(),
                }),
                Some(ImagePull::Retrying(failure)) => {
                    entry.retrying.get_or_insert_with(|| failure.message.clone());
                }
                Some(ImagePull::Pulling) | None => {}
            }
            entry.pulling.push(node.clone());
            complete.remove(node);
        }
        report.push(entry);
    }
    let go = !nodes.is_empty()
        && new_failures.is_empty()
        && report.iter().all(|i| i.failed.is_none() && i.ready == nodes.len());
    let readiness = Readiness {
        go,
        summary: summary(&report, nodes.len()),
        nodes: nodes.len(),
        images: report,
        complete_nodes: complete,
    };
    (readiness, new_failures)
}

fn summary(images: &[ImageReadiness], nodes: usize) -> String {
    if nodes == 0 {
        return "no-go: no stack node is up".to_owned();
    }
    if images.is_empty() {
        return format!("no image to pre-pull ({nodes} stack nodes)");
    }
    let complete = images.iter().filter(|i| i.failed.is_none() && i.ready == nodes).count();
    let failed: Vec<&str> = images
        .iter()
        .filter(|i| i.failed.is_some())
        .map(|i| i.image.as_str())
        .collect();
    if complete == images.len() {
        return format!("go: all {} on {nodes}/{nodes} nodes", count(images.len(), "image"));
    }
    let ready_everywhere = images
        .iter()
        .filter(|i| i.failed.is_none())
        .map(|i| i.ready)
        .min()
        .unwrap_or(0);
    let mut line = format!(
        "no-go: {complete} of {} on every node ({ready_everywhere}/{nodes} nodes hold the least pulled one)",
        count(images.len(), "image")
    );
    if !failed.is_empty() {
        line.push_str(&format!("; cannot be pulled: {}", failed.join(", ")));
    }
    line
}

fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// Each (node, image) the pre-pull pods report; a node's best report wins (an old pod still
/// holding the image while the new one pulls it).
fn pulls_by_node(pods: &[Pod]) -> BTreeMap<(&str, &str), ImagePull> {
    let mut pulls: BTreeMap<(&str, &str), ImagePull> = BTreeMap::new();
    for pod in pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
        let Some(spec) = pod.spec.as_ref() else { continue };
        let Some(node) = spec.node_name.as_deref() else {
            continue;
        };
        let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref());
        for container in &spec.containers {
            let Some(image) = container.image.as_deref() else {
                continue;
            };
            let pull = statuses
                .and_then(|all| all.iter().find(|s| s.name == container.name))
                .map_or(ImagePull::Pulling, image_pull);
            let entry = pulls.entry((node, image)).or_insert(ImagePull::Pulling);
            if rank(&pull) > rank(entry) {
                *entry = pull;
            }
        }
    }
    pulls
}

fn rank(pull: &ImagePull) -> u8 {
    match pull {
        ImagePull::Pulling => 0,
        ImagePull::Retrying(_) => 1,
        ImagePull::Failed(_) => 2,
        ImagePull::Present => 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ContainerState, ContainerStateRunning, ContainerStateWaiting, ContainerStatus, PodSpec, PodStatus,
    };

    fn pod(node: &str, containers: &[(&str, Option<(&str, &str)>)]) -> Pod {
        let spec = PodSpec {
            node_name: Some(node.into()),
            containers: containers
                .iter()
                .enumerate()
                .map(|(i, (image, _))| Container {
                    name: format!("image-{i}"),
                    image: Some((*image).into()),
                    ..Container::default()
                })
                .collect(),
            ..PodSpec::default()
        };
        let statuses = containers
            .iter()
            .enumerate()
            .map(|(i, (_, waiting))| ContainerStatus {
                name: format!("image-{i}"),
                state: Some(match waiting {
                    None => ContainerState {
                        running: Some(ContainerStateRunning::default()),
                        ..ContainerState::default()
                    },
                    Some((reason, message)) => ContainerState {
                        waiting: Some(ContainerStateWaiting {
                            reason: Some((*reason).into()),
                            message: Some((*message).into()),
                        }),
                        ..ContainerState::default()
                    },
                }),
                ..ContainerStatus::default()
            })
            .collect();
        Pod {
            spec: Some(spec),
            status: Some(PodStatus {
                container_statuses: Some(statuses),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    fn up(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    fn images(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn every_image_on_every_node_is_go() {
        let nodes = up(&["n1", "n2"]);
        let pods = [
            pod("n1", &[("r/a:1", None), ("r/b:1", None)]),
            pod("n2", &[("r/a:1", None), ("r/b:1", None)]),
        ];
        let (ready, failures) = readiness(&images(&["r/a:1", "r/b:1"]), &PrepullState::default(), &nodes, &pods);
        assert!(ready.go);
        assert_eq!(ready.summary, "go: all 2 images on 2/2 nodes");
        assert!(failures.is_empty());
        assert_eq!(ready.complete_nodes.len(), 2);
    }

    #[test]
    fn a_node_still_pulling_or_without_its_pod_is_no_go_and_keeps_its_taint() {
        let nodes = up(&["n1", "n2", "n3"]);
        let pods = [
            pod("n1", &[("r/a:1", None)]),
            pod("n2", &[("r/a:1", Some(("ContainerCreating", "")))]),
        ];
        let (ready, _) = readiness(&images(&["r/a:1"]), &PrepullState::default(), &nodes, &pods);
        assert!(!ready.go);
        assert_eq!(ready.images[0].ready, 1);
        assert_eq!(ready.images[0].pulling, ["n2", "n3"]);
        assert_eq!(ready.complete_nodes, images(&["n1"]));
        assert!(
            ready.summary.starts_with("no-go: 0 of 1 image on every node"),
            "{}",
            ready.summary
        );
    }

    #[test]
    fn a_missing_tag_is_a_definite_failure_and_a_down_registry_is_retried() {
        let nodes = up(&["n1"]);
        let pods = [pod(
            "n1",
            &[
                (
                    "r/gone:1",
                    Some(("ErrImagePull", "rpc error: code = NotFound desc = r/gone:1: not found")),
                ),
                (
                    "r/slow:1",
                    Some(("ImagePullBackOff", "dial tcp 10.0.0.1:443: connect: connection refused")),
                ),
            ],
        )];
        let (ready, failures) = readiness(
            &images(&["r/gone:1", "r/slow:1"]),
            &PrepullState::default(),
            &nodes,
            &pods,
        );
        assert_eq!(failures.len(), 1);
        assert_eq!(failures[0].image, "r/gone:1");
        assert_eq!(failures[0].failure.reason, crate::model::FailureReason::ImageNotFound);
        let slow = ready.images.iter().find(|i| i.image == "r/slow:1").unwrap();
        assert!(slow.retrying.as_deref().unwrap().contains("connection refused"));
        assert!(!ready.go);
    }

    #[test]
    fn a_recorded_failure_is_shown_and_makes_it_no_go() {
        let mut state = PrepullState::default();
        state.record_failure(
            "r/gone:1",
            ImageFailure::new(
                "n1",
                Failure::new(crate::model::FailureReason::ImageNotFound, "not found"),
                jiff::Timestamp::UNIX_EPOCH,
            ),
        );
        let nodes = up(&["n1"]);
        let pods = [pod("n1", &[("r/a:1", None)])];
        let (ready, _) = readiness(&images(&["r/a:1", "r/gone:1"]), &state, &nodes, &pods);
        assert!(!ready.go);
        assert!(
            ready.summary.ends_with("cannot be pulled: r/gone:1"),
            "{}",
            ready.summary
        );
        assert_eq!(
            ready.complete_nodes,
            images(&["n1"]),
            "a failed image does not hold the taint"
        );
    }

    #[test]
    fn an_image_the_kubelet_lists_is_not_taken_for_present() {
        // The node's list is stale after a removal: only a running container counts.
        let nodes = up(&["n1"]);
        let pods = [pod("n1", &[("r/a:1", Some(("ContainerCreating", "")))])];
        let (ready, _) = readiness(&images(&["r/a:1"]), &PrepullState::default(), &nodes, &pods);
        assert!(!ready.go, "{}", ready.summary);
    }
}
