//! What a pod's status says about its start, read as a kubelet (v1.34) writes it (pure).
//!
//! A pod that cannot start stays in phase `Pending` while the kubelet retries; its container
//! statuses' `waiting` reason and message say why (`ErrImagePull`, `ImagePullBackOff`,
//! `CreateContainerConfigError`, ...). A container that ran and ended is `terminated`, and
//! with `restartPolicy: Never` (forced by the validator) it stays so. This module only
//! reads and classifies; whether and when that ends the stack is the lifecycle rule's call
//! ([`crate::lifecycle::judge_pod`]).

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{ContainerStateTerminated, ContainerStatus, Pod, PodStatus};

use crate::model::{Failure, FailureReason, ISOLATION_CHECK_CONTAINER};

/// How the kubelet's `rejectPod` (pkg/kubelet/kubelet.go) starts the message of a pod it
/// refuses to admit; `status.reason` is then the predicate (lifecycle/predicate.go).
const REJECTED_PREFIX: &str = "Pod was rejected: ";

/// What the pod's status shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PodHealth {
    /// Its `Ready` condition is `True`: every container is ready (without a readiness probe:
    /// started and running). `ready_by`: the latest instant it can have become Ready (the
    /// condition's time is in whole seconds, so one second after it), if the kubelet said.
    Ready { ready_by: Option<Timestamp> },
    /// Not Ready yet, and nothing seen that rules it out: what the stack fails with if it
    /// stays so past its start deadline (a transient error, or `start_timeout` with what it
    /// waits for).
    Starting(Failure),
    /// Phase `Succeeded`: every container exited 0.
    Succeeded,
    /// It will never be Ready, however long one waits.
    Failed(Failure),
    /// The kubelet refused to admit it: a matter of the node, not of the challenge.
    Rejected(Rejection),
}

/// A kubelet's admission refusal (phase `Failed`, message `Pod was rejected: ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rejection {
    /// The failing predicate (`NodePorts`, `NodeAffinity`, ...) or `OutOf<resource>`
    /// (`OutOfcpu`, `OutOfmemory`, `OutOfpods`, ...).
    pub reason: String,
    pub message: String,
}

impl Rejection {
    /// Its host ports are taken on the node: other ports may fit.
    pub(crate) fn is_port_conflict(&self) -> bool {
        self.reason == "NodePorts"
    }
}

/// Reads `pod`'s status (the spec only to tell sidecars from init containers).
pub(crate) fn pod_health(pod: &Pod) -> PodHealth {
    let Some(status) = pod.status.as_ref() else {
        return PodHealth::Starting(Failure::new(
            FailureReason::StartTimeout,
            "no status from the kubelet yet",
        ));
    };
    let phase = status.phase.as_deref().unwrap_or_default();
    let reason = status.reason.as_deref().unwrap_or_default();
    let message = status.message.as_deref().unwrap_or_default();
    if phase == "Failed" && message.starts_with(REJECTED_PREFIX) {
        return PodHealth::Rejected(Rejection {
            reason: reason.to_owned(),
            message: message.to_owned(),
        });
    }
    if phase == "Succeeded" {
        return PodHealth::Succeeded;
    }
    // The pod's own reason (eviction, deadline, node shutdown) says more than the exit codes
    // of the containers it killed.
    if phase == "Failed" && !reason.is_empty() {
        let failure = match reason {
            "Evicted" => Failure::new(FailureReason::Evicted, message.trim_end()),
            _ => Failure::new(FailureReason::PodFailed, joined(reason, message)),
        };
        return PodHealth::Failed(failure);
    }
    if has_condition(status, "Ready") {
        return PodHealth::Ready {
            ready_by: ready_since(status).map(|t| t.saturating_add(SignedDuration::from_secs(1)).unwrap_or(t)),
        };
    }
    let mut definite: Option<Issue> = None;
    let mut transient: Option<Failure> = None;
    for (container, kind) in containers(pod, status) {
        match issue(container, kind) {
            Some(Seen::Definite(found)) if definite.as_ref().is_none_or(|d| found.rank > d.rank) => {
                definite = Some(found);
            }
            Some(Seen::Transient(found)) if transient.is_none() => transient = Some(found),
            _ => {}
        }
    }
    if let Some(found) = definite {
        return PodHealth::Failed(found.failure);
    }
    if phase == "Failed" {
        return PodHealth::Failed(Failure::new(FailureReason::PodFailed, joined("Failed", message)));
    }
    PodHealth::Starting(transient.unwrap_or_else(|| waiting(status, phase)))
}

/// Where one container's image stands on its node, for the pre-pull (`prepull`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ImagePull {
    /// On the node: the runtime made a container of it (running, ended or refused to start).
    Present,
    /// Being pulled, or waiting for its turn (the pod's init container, the sandbox).
    Pulling,
    /// A pull error that may clear (registry unreachable, rate limited): the kubelet retries.
    Retrying(Failure),
    /// A pull that can never succeed: no such tag, denied, an invalid name.
    Failed(Failure),
}

/// Reads a container's status as its image's presence on the node.
pub(crate) fn image_pull(container: &ContainerStatus) -> ImagePull {
    let Some(waiting) = container.state.as_ref().and_then(|s| s.waiting.as_ref()) else {
        // Running or terminated: created from the image, so the image is there.
        return if container.state.is_some() {
            ImagePull::Present
        } else {
            ImagePull::Pulling
        };
    };
    match waiting.reason.as_deref().unwrap_or_default() {
        "ErrImagePull"
        | "ImagePullBackOff"
        | "InvalidImageName"
        | "ErrImageNeverPull"
        | "SignatureValidationFailed"
        | "RegistryUnavailable"
        | "ImageInspectError" => match issue(container, Kind::Main) {
            Some(Seen::Definite(found)) => ImagePull::Failed(found.failure),
            Some(Seen::Transient(failure)) => ImagePull::Retrying(failure),
            None => ImagePull::Pulling,
        },
        // Past the pull: the container, not the image, is what failed.
        "CreateContainerError" | "CreateContainerConfigError" | "RunContainerError" | "CrashLoopBackOff" => {
            ImagePull::Present
        }
        _ => ImagePull::Pulling,
    }
}

/// Where a container stands in the pod: what its end means depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Runs to completion before the others start.
    Init,
    /// An init container with `restartPolicy: Always`: restarted whatever the pod's policy.
    Sidecar,
    Main,
}

/// A definite failure, ranked: a container that exited 0 explains less than anything else.
struct Issue {
    failure: Failure,
    rank: u8,
}

enum Seen {
    Definite(Issue),
    Transient(Failure),
}

fn containers<'a>(pod: &'a Pod, status: &'a PodStatus) -> impl Iterator<Item = (&'a ContainerStatus, Kind)> {
    let sidecar = |name: &str| {
        pod.spec
            .as_ref()
            .and_then(|s| s.init_containers.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.name == name && c.restart_policy.as_deref() == Some("Always"))
    };
    let init = status.init_container_statuses.iter().flatten().map(move |c| {
        let kind = if sidecar(&c.name) { Kind::Sidecar } else { Kind::Init };
        (c, kind)
    });
    init.chain(status.container_statuses.iter().flatten().map(|c| (c, Kind::Main)))
}

fn issue(container: &ContainerStatus, kind: Kind) -> Option<Seen> {
    let state = container.state.as_ref()?;
    let who = match kind {
        Kind::Main => format!("container {}", container.name),
        Kind::Init | Kind::Sidecar => format!("init container {}", container.name),
    };
    if let Some(waiting) = &state.waiting {
        let reason = waiting.reason.as_deref().unwrap_or_default();
        let message = waiting.message.as_deref().unwrap_or_default();
        let failure = |class| Failure::new(class, format!("{who}: {}", joined(reason, message)));
        let definite = |class| {
            Some(Seen::Definite(Issue {
                failure: failure(class),
                rank: 2,
            }))
        };
        return match reason {
            // The back-off's message carries the pull error it backs off from.
            "ErrImagePull" | "ImagePullBackOff" => match pull_error(message) {
                Some(class) => definite(class),
                None => Some(Seen::Transient(failure(FailureReason::ImagePullFailed))),
            },
            "InvalidImageName" => definite(FailureReason::InvalidImageName),
            "ErrImageNeverPull" => definite(FailureReason::ImageNotFound),
            "SignatureValidationFailed" => definite(FailureReason::ImagePullDenied),
            "RegistryUnavailable" | "ImageInspectError" => {
                Some(Seen::Transient(failure(FailureReason::ImagePullFailed)))
            }
            "CreateContainerConfigError" => definite(FailureReason::ContainerConfigError),
            "CreateContainerError" if is_runtime_timeout(message) => {
                Some(Seen::Transient(failure(FailureReason::ContainerStartError)))
            }
            "CreateContainerError"
            | "RunContainerError"
            | "PreCreateHookError"
            | "PreStartHookError"
            | "PostStartHookError" => definite(FailureReason::ContainerStartError),
            // Only sidecars restart: each crash may be its last.
            "CrashLoopBackOff" => {
                let last = container.last_state.as_ref().and_then(|s| s.terminated.as_ref());
                let why = last.map_or_else(|| joined(reason, message), exit_text);
                Some(Seen::Transient(Failure::new(
                    FailureReason::ContainerExited,
                    format!("{who}: {why}"),
                )))
            }
            // ContainerCreating, PodInitializing: on its way.
            _ => None,
        };
    }
    let terminated = state.terminated.as_ref()?;
    let text = format!("{who}: {}", exit_text(terminated));
    let reason = terminated.reason.as_deref().unwrap_or_default();
    if matches!(reason, "StartError" | "ContainerCannotRun") {
        let failure = Failure::new(FailureReason::ContainerStartError, text);
        return Some(Seen::Definite(Issue { failure, rank: 2 }));
    }
    let class = if container.name == ISOLATION_CHECK_CONTAINER {
        FailureReason::IsolationNotEnforced
    } else {
        FailureReason::ContainerExited
    };
    let exited = Failure::new(class, text);
    match (kind, terminated.exit_code) {
        (Kind::Init | Kind::Sidecar, 0) => None,
        (Kind::Sidecar, _) => Some(Seen::Transient(exited)),
        (Kind::Init, _) => Some(Seen::Definite(Issue {
            failure: exited,
            rank: 2,
        })),
        // Never restarted, and a pod with a terminated container is never Ready.
        (Kind::Main, code) => Some(Seen::Definite(Issue {
            failure: exited,
            rank: if code == 0 { 1 } else { 2 },
        })),
    }
}

/// The definite class of an image pull error, from the runtime's message (containerd's via
/// the kubelet; a back-off quotes the error it backs off from); `None` for a cause that may
/// clear (registry unreachable, rate limited, 5xx, timeouts).
fn pull_error(message: &str) -> Option<FailureReason> {
    const DENIED: &[&str] = &[
        "pull access denied",
        "access denied",
        "denied: ",
        "401 unauthorized",
        "403 forbidden",
        "unauthorized: ",
        "insufficient_scope",
        "no basic auth credentials",
        "code = permissiondenied",
        "code = unauthenticated",
    ];
    const NOT_FOUND: &[&str] = &[
        ": not found",
        "code = notfound",
        "manifest unknown",
        "name unknown",
        "404 not found",
    ];
    let message = message.to_ascii_lowercase();
    let says = |words: &[&str]| words.iter().any(|w| message.contains(w));
    // Docker Hub answers a missing repository with "pull access denied, repository does not
    // exist or may require authorization": denied, as the registry words it.
    if says(DENIED) {
        Some(FailureReason::ImagePullDenied)
    } else if says(NOT_FOUND) {
        Some(FailureReason::ImageNotFound)
    } else {
        None
    }
}

/// The runtime did not answer in time (a busy node): the kubelet tries again.
fn is_runtime_timeout(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    [
        "context deadline exceeded",
        "code = deadlineexceeded",
        "failed to reserve container name",
    ]
    .iter()
    .any(|w| message.contains(w))
}

/// `exited with code 1 (Error): <termination message>`.
fn exit_text(terminated: &ContainerStateTerminated) -> String {
    let code = terminated.exit_code;
    let reason = terminated.reason.as_deref().unwrap_or_default();
    let head = match reason {
        "OOMKilled" => format!("was killed for running out of memory (OOMKilled, exit code {code})"),
        "StartError" | "ContainerCannotRun" => format!("could not start ({reason}, exit code {code})"),
        "" => format!("exited with code {code}"),
        _ => format!("exited with code {code} ({reason})"),
    };
    match terminated.message.as_deref().map(str::trim).filter(|m| !m.is_empty()) {
        Some(message) => format!("{head}: {message}"),
        None => head,
    }
}

/// What a pod with nothing wrong in sight waits for: the `Ready` condition's words
/// (`containers with unready status: [web]`) and the first waiting container's reason.
fn waiting(status: &PodStatus, phase: &str) -> Failure {
    let ready = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
        .and_then(|c| c.message.as_deref());
    let first_waiting = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .find_map(|c| {
            let reason = c.state.as_ref()?.waiting.as_ref()?.reason.as_deref()?;
            Some(format!("container {}: {reason}", c.name))
        });
    let phase = if phase.is_empty() { "Pending" } else { phase };
    let mut text = format!("phase {phase}");
    for part in [ready.map(str::to_owned), first_waiting].into_iter().flatten() {
        text.push_str("; ");
        text.push_str(&part);
    }
    Failure::new(FailureReason::StartTimeout, text)
}

/// When the `Ready` condition last turned (whole seconds).
fn ready_since(status: &PodStatus) -> Option<Timestamp> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
}

impl PodHealth {
    /// The same health, known to be Ready at `seen` at the latest (a watch delivered it then).
    pub(crate) fn seen_ready_at(self, seen: Timestamp) -> Self {
        match self {
            PodHealth::Ready { ready_by } => PodHealth::Ready {
                ready_by: Some(ready_by.map_or(seen, |by| by.min(seen))),
            },
            other => other,
        }
    }
}

fn has_condition(status: &PodStatus, type_: &str) -> bool {
    status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// `reason: message`, or whichever of the two is there.
fn joined(reason: &str, message: &str) -> String {
    match (reason.is_empty(), message.trim().is_empty()) {
        (false, false) => format!("{reason}: {}", message.trim()),
        (false, true) => reason.to_owned(),
        (true, _) => message.trim().to_owned(),
    }
}

#[cfg(test)]
pub(crate) mod kubelet;
#[cfg(test)]
mod tests;
