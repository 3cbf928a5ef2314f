use super::kubelet::{self, IMAGE};
use super::*;
use crate::model::FailureReason as R;

fn failed(pod: &Pod) -> Failure {
    match pod_health(pod) {
        PodHealth::Failed(failure) => failure,
        other => panic!("expected a definite failure, got {other:?}"),
    }
}

fn starting(pod: &Pod) -> Failure {
    match pod_health(pod) {
        PodHealth::Starting(failure) => failure,
        other => panic!("expected a pod still starting, got {other:?}"),
    }
}

/// [`failed`] for a pod whose container waits with the kubelet's `reason` and `message`.
fn failed_while(reason: &str, message: &str) -> Failure {
    failed(&kubelet::waiting_for(reason, message))
}

/// [`starting`] for a pod whose container waits with the kubelet's `reason` and `message`.
fn starting_while(reason: &str, message: &str) -> Failure {
    starting(&kubelet::waiting_for(reason, message))
}

#[test]
fn only_the_ready_condition_makes_a_pod_ready() {
    assert!(matches!(pod_health(&kubelet::ready()), PodHealth::Ready { .. }));
    // Phase Running, container started, readiness probe not passed yet: not connectable.
    let running = kubelet::started_not_ready();
    assert_eq!(
        running.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running")
    );
    let waits = starting(&running);
    assert_eq!(waits.reason, R::StartTimeout);
    assert_eq!(waits.message, "phase Running; containers with unready status: [web]");
}

#[test]
fn a_pod_on_its_way_is_starting_with_nothing_wrong() {
    let pulling = starting(&kubelet::pulling());
    assert_eq!(pulling.reason, R::StartTimeout);
    assert_eq!(
        pulling.message,
        "phase Pending; containers with unready status: [web]; container web: ContainerCreating"
    );
    assert_eq!(starting(&kubelet::just_bound()).reason, R::StartTimeout);
    assert_eq!(starting(&Pod::default()).reason, R::StartTimeout);
}

#[test]
fn a_missing_image_fails_at_once_whether_pulled_or_backed_off() {
    for message in [kubelet::NOT_FOUND, kubelet::NOT_FOUND_BARE] {
        let failure = failed_while("ErrImagePull", message);
        assert_eq!(failure.reason, R::ImageNotFound, "{message}");
        assert_eq!(failure.message, format!("container web: ErrImagePull: {message}"));
    }
    // The back-off quotes the error it backs off from.
    let backed_off = kubelet::back_off(kubelet::NOT_FOUND);
    let failure = failed_while("ImagePullBackOff", &backed_off);
    assert_eq!(failure.reason, R::ImageNotFound);
    assert!(
        failure
            .message
            .starts_with("container web: ImagePullBackOff: Back-off pulling image")
    );
    for message in [
        "rpc error: code = Unknown desc = failed to pull and unpack image \"123456789012.dkr.ecr.eu-west-1.amazonaws.com/web:2\": failed to resolve reference \"123456789012.dkr.ecr.eu-west-1.amazonaws.com/web:2\": 123456789012.dkr.ecr.eu-west-1.amazonaws.com/web:2: not found",
        "rpc error: code = Unknown desc = failed to pull and unpack image \"ghcr.io/ctf/web:2\": failed to resolve reference \"ghcr.io/ctf/web:2\": ghcr.io/ctf/web:2: not found: manifest unknown",
    ] {
        assert_eq!(failed_while("ErrImagePull", message).reason, R::ImageNotFound);
    }
}

#[test]
fn a_registry_that_refuses_fails_at_once() {
    for message in [
        kubelet::UNAUTHORIZED.to_owned(),
        kubelet::PULL_ACCESS_DENIED.to_owned(),
        kubelet::back_off(kubelet::UNAUTHORIZED),
        "rpc error: code = Unknown desc = failed to pull and unpack image \"ghcr.io/ctf/web:1\": failed to resolve reference \"ghcr.io/ctf/web:1\": unexpected status from HEAD request to https://ghcr.io/v2/ctf/web/manifests/1: 403 Forbidden".to_owned(),
    ] {
        let failure = failed_while("ErrImagePull", &message);
        assert_eq!(failure.reason, R::ImagePullDenied, "{message}");
    }
    let signature = failed_while(
        "SignatureValidationFailed",
        "image pull failed for 10.80.0.1:5000/web:1 because the signature validation failed: unsigned",
    );
    assert_eq!(signature.reason, R::ImagePullDenied);
}

#[test]
fn an_unreachable_registry_or_a_bare_back_off_is_transient() {
    let refused = starting_while("ErrImagePull", kubelet::REFUSED);
    assert_eq!(refused.reason, R::ImagePullFailed);
    assert!(
        refused.message.contains("connect: connection refused"),
        "{}",
        refused.message
    );
    let backed_off = kubelet::back_off(kubelet::REFUSED);
    assert_eq!(
        starting_while("ImagePullBackOff", &backed_off).reason,
        R::ImagePullFailed
    );
    let bare = format!("Back-off pulling image \"{IMAGE}\"");
    assert_eq!(starting_while("ImagePullBackOff", &bare).reason, R::ImagePullFailed);
    for message in [
        "rpc error: code = Unknown desc = failed to pull and unpack image \"docker.io/library/nginx:1.27\": failed to copy: httpReadSeeker: failed open: unexpected status code https://registry-1.docker.io/v2/library/nginx/manifests/sha256:0a1b: 429 Too Many Requests - Server message: toomanyrequests: You have reached your unauthenticated pull rate limit",
        "rpc error: code = Unknown desc = failed to pull and unpack image \"10.80.0.1:5000/web:1\": failed to resolve reference \"10.80.0.1:5000/web:1\": failed to do request: Head \"https://10.80.0.1:5000/v2/web/manifests/1\": dial tcp 10.80.0.1:5000: i/o timeout",
        "image pull failed for 10.80.0.1:5000/web:1 because the registry is unavailable: 503 Service Unavailable",
    ] {
        assert_eq!(
            starting_while("ErrImagePull", message).reason,
            R::ImagePullFailed,
            "{message}"
        );
    }
    assert_eq!(
        starting_while(
            "RegistryUnavailable",
            "image pull failed for 10.80.0.1:5000/web:1 because the registry is unavailable"
        )
        .reason,
        R::ImagePullFailed
    );
}

#[test]
fn invalid_names_and_config_errors_fail_at_once() {
    let name = failed_while(
        "InvalidImageName",
        "Failed to apply default image tag \"Web:Latest\": couldn't parse image name \"Web:Latest\": invalid reference format: repository name (library/Web) must be lowercase",
    );
    assert_eq!(name.reason, R::InvalidImageName);
    let root = failed_while("CreateContainerConfigError", kubelet::RUN_AS_ROOT);
    assert_eq!(root.reason, R::ContainerConfigError);
    assert_eq!(
        root.message,
        format!("container web: CreateContainerConfigError: {}", kubelet::RUN_AS_ROOT)
    );
    let key = failed_while(
        "CreateContainerConfigError",
        "couldn't find key flag in Secret stacks/flag",
    );
    assert_eq!(key.reason, R::ContainerConfigError);
}

#[test]
fn create_and_start_errors_fail_at_once_unless_the_runtime_timed_out() {
    let spec = failed_while(
        "CreateContainerError",
        "failed to generate container \"0f1e2d\" spec: failed to generate spec: no command specified",
    );
    assert_eq!(spec.reason, R::ContainerStartError);
    let busy = starting_while("CreateContainerError", "context deadline exceeded");
    assert_eq!(busy.reason, R::ContainerStartError);
    let run = failed_while("RunContainerError", kubelet::NO_ENTRYPOINT);
    assert_eq!(run.reason, R::ContainerStartError);
    // With restartPolicy Never the failed start stays as a terminated container.
    let start = failed(&kubelet::exited(128, "StartError", Some(kubelet::NO_ENTRYPOINT)));
    assert_eq!(start.reason, R::ContainerStartError);
    assert_eq!(
        start.message,
        format!(
            "container web: could not start (StartError, exit code 128): {}",
            kubelet::NO_ENTRYPOINT
        )
    );
    let docker = failed(&kubelet::exited(
        128,
        "ContainerCannotRun",
        Some("OCI runtime create failed"),
    ));
    assert_eq!(docker.reason, R::ContainerStartError);
}

#[test]
fn an_exited_container_fails_with_its_exit_code() {
    let error = failed(&kubelet::exited(1, "Error", None));
    assert_eq!(error.reason, R::ContainerExited);
    assert_eq!(error.message, "container web: exited with code 1 (Error)");
    let oom = failed(&kubelet::exited(137, "OOMKilled", None));
    assert_eq!(oom.reason, R::ContainerExited);
    assert_eq!(
        oom.message,
        "container web: was killed for running out of memory (OOMKilled, exit code 137)"
    );
    let said = failed(&kubelet::exited(2, "Error", Some("flag file missing\n")));
    assert_eq!(
        said.message,
        "container web: exited with code 2 (Error): flag file missing"
    );
    // One container of two ended while the other runs (phase Running): never Ready again.
    let half = failed(&kubelet::one_of_two_exited(0, "Completed"));
    assert_eq!(half.reason, R::ContainerExited);
    assert_eq!(half.message, "container web: exited with code 0 (Completed)");
    assert_eq!(pod_health(&kubelet::exited(0, "Completed", None)), PodHealth::Succeeded);
}

#[test]
fn init_containers_fail_on_a_bad_exit_and_sidecars_only_after_the_deadline() {
    let bad = failed(&kubelet::init_container(false, kubelet::init_exited(3), None));
    assert_eq!(bad.reason, R::ContainerExited);
    assert_eq!(bad.message, "init container init: exited with code 3 (Error)");
    assert_eq!(
        starting(&kubelet::init_container(false, kubelet::init_exited(0), None)).reason,
        R::StartTimeout
    );
    let (state, last) = kubelet::crash_loop(1);
    let sidecar = starting(&kubelet::init_container(true, state, Some(last)));
    assert_eq!(sidecar.reason, R::ContainerExited);
    assert_eq!(sidecar.message, "init container init: exited with code 1 (Error)");
    let pulling = failed(&kubelet::init_container(
        false,
        serde_json::json!({"waiting": {"reason": "ErrImagePull", "message": kubelet::NOT_FOUND}}),
        None,
    ));
    assert_eq!(pulling.reason, R::ImageNotFound);
    assert!(pulling.message.starts_with("init container init: ErrImagePull: "));
}

#[test]
fn evictions_and_other_pod_failures_say_the_pods_own_reason() {
    let evicted = failed(&kubelet::evicted(
        "Pod ephemeral local storage usage exceeds the total limit of containers 1Gi. ",
    ));
    assert_eq!(evicted.reason, R::Evicted);
    assert_eq!(
        evicted.message,
        "Pod ephemeral local storage usage exceeds the total limit of containers 1Gi."
    );
    let mut deadline = kubelet::exited(137, "Error", None);
    if let Some(status) = deadline.status.as_mut() {
        status.reason = Some("DeadlineExceeded".into());
        status.message = Some("Pod was active on the node longer than the specified deadline".into());
    }
    let failure = failed(&deadline);
    assert_eq!(failure.reason, R::PodFailed);
    assert_eq!(
        failure.message,
        "DeadlineExceeded: Pod was active on the node longer than the specified deadline"
    );
}

#[test]
fn kubelet_admission_refusals_are_rejections_not_failures() {
    let ports = kubelet::rejected(
        "NodePorts",
        "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports",
    );
    let PodHealth::Rejected(rejection) = pod_health(&ports) else {
        panic!("{:?}", pod_health(&ports));
    };
    assert!(rejection.is_port_conflict());
    assert_eq!(
        rejection.message,
        "Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
    );
    for (reason, message) in [
        (
            "OutOfcpu",
            "Node didn't have enough resource: cpu, requested: 2000, used: 3850, capacity: 4000",
        ),
        (
            "OutOfmemory",
            "Node didn't have enough resource: memory, requested: 1073741824, used: 7516192768, capacity: 8321499136",
        ),
        (
            "OutOfpods",
            "Node didn't have enough resource: pods, requested: 1, used: 110, capacity: 110",
        ),
        (
            "NodeAffinity",
            "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector",
        ),
    ] {
        let PodHealth::Rejected(rejection) = pod_health(&kubelet::rejected(reason, message)) else {
            panic!("{reason}");
        };
        assert!(!rejection.is_port_conflict(), "{reason}");
        assert_eq!(rejection.reason, reason);
    }
}

#[test]
fn long_messages_are_cut_on_a_character_boundary() {
    let long = format!("{}é", "x".repeat(Failure::MAX_MESSAGE_CHARS - 1));
    let failure = Failure::new(R::PodFailed, format!("{long}tail"));
    assert_eq!(failure.message.chars().count(), Failure::MAX_MESSAGE_CHARS);
    assert!(failure.message.ends_with('é'));
}
