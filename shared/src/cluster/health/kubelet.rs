//! Stack pods as a real kubelet (v1.34, containerd) leaves them, for tests: the status fields
//! and words of pkg/kubelet (kubelet_pods.go, status/generate.go, images, kuberuntime,
//! lifecycle/predicate.go), the shape `kubectl get pod -o json` shows.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

pub(crate) const IMAGE: &str = "10.80.0.1:5000/web:1";
const AT: &str = "2030-01-01T12:00:00Z";
/// When a Ready pod turned Ready: a while before [`AT`], so that kube-proxy has synced.
pub(crate) const READY_SINCE: &str = "2030-01-01T11:59:50Z";

/// containerd's answer for a tag or repository the registry does not have.
pub(crate) const NOT_FOUND: &str = "rpc error: code = NotFound desc = failed to pull and unpack image \"10.80.0.1:5000/nope:1\": failed to resolve reference \"10.80.0.1:5000/nope:1\": 10.80.0.1:5000/nope:1: not found";
/// The same without the gRPC wrapper, as containerd logs it.
pub(crate) const NOT_FOUND_BARE: &str = "failed to pull and unpack image \"10.80.0.1:5000/nope:1\": failed to resolve reference \"10.80.0.1:5000/nope:1\": 10.80.0.1:5000/nope:1: not found";
/// A registry with nothing listening.
pub(crate) const REFUSED: &str = "rpc error: code = Unknown desc = failed to pull and unpack image \"10.80.0.1:5000/web:1\": failed to resolve reference \"10.80.0.1:5000/web:1\": failed to do request: Head \"https://10.80.0.1:5000/v2/web/manifests/1\": dial tcp 10.80.0.1:5000: connect: connection refused";
/// A private registry asked without credentials.
pub(crate) const UNAUTHORIZED: &str = "rpc error: code = Unknown desc = failed to pull and unpack image \"10.80.0.1:5000/private/web:1\": failed to resolve reference \"10.80.0.1:5000/private/web:1\": failed to authorize: failed to fetch anonymous token: unexpected status from GET request to https://10.80.0.1:5000/token?scope=repository%3Aprivate%2Fweb%3Apull&service=registry: 401 Unauthorized";
/// Docker Hub's answer for a private or missing repository.
pub(crate) const PULL_ACCESS_DENIED: &str = "rpc error: code = Unknown desc = failed to pull and unpack image \"docker.io/ctf/secret:1\": failed to resolve reference \"docker.io/ctf/secret:1\": pull access denied, repository does not exist or may require authorization: server message: insufficient_scope: authorization failed";
/// The kubelet's runAsNonRoot check on an image whose user is root.
pub(crate) const RUN_AS_ROOT: &str = "container has runAsNonRoot and image will run as root (pod: \"stack-00000000000000aa_stacks(7d3c9a56-1d4e-4c55-9a8e-2f4b8e0c1a11)\", container: web)";
/// runc, for an entrypoint that does not exist.
pub(crate) const NO_ENTRYPOINT: &str = "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: exec: \"/app/server\": stat /app/server: no such file or directory: unknown";

/// The back-off message the kubelet shows after a failed pull (images/image_manager.go).
pub(crate) fn back_off(pull_error: &str) -> String {
    format!("Back-off pulling image \"{IMAGE}\": ErrImagePull: {pull_error}")
}

/// A stack pod bound to `n1` with one container `web` (and `init` containers if given),
/// with `status` as the kubelet wrote it.
pub(crate) fn pod_with(init_containers: Value, status: Value) -> Pod {
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "stack-00000000000000aa",
            "namespace": "stacks",
            "uid": "7d3c9a56-1d4e-4c55-9a8e-2f4b8e0c1a11",
            "resourceVersion": "4711",
            "creationTimestamp": AT,
            "labels": {
                "app.kubernetes.io/managed-by": "stack-provisioner",
                "stack-provisioner/stack-id": "stack-00000000000000aa"
            }
        },
        "spec": {
            "nodeName": "n1",
            "restartPolicy": "Never",
            "activeDeadlineSeconds": 28800,
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "nodeSelector": {"role": "stack"},
            "initContainers": init_containers,
            "containers": [{
                "name": "web",
                "image": IMAGE,
                "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "resources": {
                    "limits": {"cpu": "100m", "memory": "64Mi", "ephemeral-storage": "1Gi"},
                    "requests": {"cpu": "100m", "memory": "64Mi", "ephemeral-storage": "1Gi"}
                }
            }]
        },
        "status": status
    });
    serde_json::from_value(pod).unwrap_or_else(|e| panic!("kubelet pod fixture: {e}"))
}

pub(crate) fn pod(status: Value) -> Pod {
    pod_with(json!([]), status)
}

/// `type`/`status` pod conditions as status/generate.go words them, Ready as given.
fn conditions(ready: bool, not_ready_reason: &str, initialized: bool) -> Value {
    let condition = |type_: &str, ok: bool, reason: Option<&str>, message: Option<String>| {
        let at = if type_ == "Ready" && ok { READY_SINCE } else { AT };
        let mut c = json!({"type": type_, "status": if ok { "True" } else { "False" }, "lastProbeTime": null, "lastTransitionTime": at});
        if let Some(reason) = reason {
            c["reason"] = json!(reason);
        }
        if let Some(message) = message {
            c["message"] = json!(message);
        }
        c
    };
    let unready =
        (not_ready_reason == "ContainersNotReady").then(|| "containers with unready status: [web]".to_owned());
    let reason = (!ready).then_some(not_ready_reason);
    json!([
        condition("PodReadyToStartContainers", true, None, None),
        condition(
            "Initialized",
            initialized,
            (!initialized).then_some("ContainersNotInitialized"),
            (!initialized).then(|| "containers with incomplete status: [init]".to_owned())
        ),
        condition("Ready", ready, reason, unready.clone()),
        condition("ContainersReady", ready, reason, unready),
        condition("PodScheduled", true, None, None)
    ])
}

fn status(phase: &str, conditions: Value, init: Value, containers: Value) -> Value {
    json!({
        "phase": phase,
        "conditions": conditions,
        "hostIP": "10.80.0.11",
        "hostIPs": [{"ip": "10.80.0.11"}],
        "podIP": "10.244.1.7",
        "podIPs": [{"ip": "10.244.1.7"}],
        "startTime": AT,
        "initContainerStatuses": init,
        "containerStatuses": containers,
        "qosClass": "Guaranteed"
    })
}

fn container(name: &str, ready: bool, started: bool, state: Value) -> Value {
    let mut c = json!({
        "name": name,
        "image": IMAGE,
        "imageID": "",
        "ready": ready,
        "restartCount": 0,
        "started": started,
        "state": state
    });
    if state_is(&c, "running") || state_is(&c, "terminated") {
        c["imageID"] =
            json!("10.80.0.1:5000/web@sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08");
        c["containerID"] = json!("containerd://1f0c5e0e43c2d9c52b8e0b4a0d9c1c2b6a8f7e6d5c4b3a291807f6e5d4c3b2a1");
    }
    c
}

fn state_is(container: &Value, state: &str) -> bool {
    container["state"].get(state).is_some()
}

fn waiting(reason: &str, message: Option<&str>) -> Value {
    match message {
        Some(message) => json!({"waiting": {"reason": reason, "message": message}}),
        None => json!({"waiting": {"reason": reason}}),
    }
}

fn terminated(code: i32, reason: &str, message: Option<&str>) -> Value {
    let mut t = json!({"exitCode": code, "reason": reason, "startedAt": AT, "finishedAt": AT,
        "containerID": "containerd://1f0c5e0e43c2d9c52b8e0b4a0d9c1c2b6a8f7e6d5c4b3a291807f6e5d4c3b2a1"});
    if let Some(message) = message {
        t["message"] = json!(message);
    }
    json!({ "terminated": t })
}

/// Pending, `web` waiting with the kubelet's `reason` (`ContainerCreating` while it pulls,
/// `ErrImagePull`, `ImagePullBackOff`, `CreateContainerConfigError`, ...).
pub(crate) fn waiting_for(reason: &str, message: &str) -> Pod {
    pending(waiting(reason, Some(message)))
}

/// Still pulling the image: the kubelet's default waiting state, which says no more.
pub(crate) fn pulling() -> Pod {
    pending(waiting("ContainerCreating", None))
}

/// Pending, `web` in the `waiting` state given.
fn pending(waiting: Value) -> Pod {
    pod(status(
        "Pending",
        conditions(false, "ContainersNotReady", true),
        json!([]),
        json!([container("web", false, false, waiting)]),
    ))
}

/// Running, the container started, its readiness probe not yet passed.
pub(crate) fn started_not_ready() -> Pod {
    running(false)
}

/// Running and Ready.
pub(crate) fn ready() -> Pod {
    running(true)
}

/// Phase Running, `web` started; Ready or not.
fn running(ready: bool) -> Pod {
    let not_ready_reason = if ready { "" } else { "ContainersNotReady" };
    pod(status(
        "Running",
        conditions(ready, not_ready_reason, true),
        json!([]),
        json!([container("web", ready, true, json!({"running": {"startedAt": AT}}))]),
    ))
}

/// `web` terminated (`restartPolicy: Never`): phase Failed, or Succeeded for exit 0.
pub(crate) fn exited(code: i32, reason: &str, message: Option<&str>) -> Pod {
    let (phase, ready_reason) = if code == 0 {
        ("Succeeded", "PodCompleted")
    } else {
        ("Failed", "PodFailed")
    };
    pod(status(
        phase,
        conditions(false, ready_reason, true),
        json!([]),
        json!([container("web", false, false, terminated(code, reason, message))]),
    ))
}

/// Two containers, `web` exited with `code` while `sidecar` still runs: phase Running.
pub(crate) fn one_of_two_exited(code: i32, reason: &str) -> Pod {
    let mut pod = pod(status(
        "Running",
        conditions(false, "ContainersNotReady", true),
        json!([]),
        json!([
            container("sidecar", true, true, json!({"running": {"startedAt": AT}})),
            container("web", false, false, terminated(code, reason, None))
        ]),
    ));
    if let Some(spec) = pod.spec.as_mut() {
        let mut sidecar = spec.containers[0].clone();
        sidecar.name = "sidecar".into();
        spec.containers.insert(0, sidecar);
    }
    pod
}

/// An init container `init` in `state` (a sidecar if `sidecar`, with `last_state` from its
/// previous run), `web` waiting for it.
pub(crate) fn init_container(sidecar: bool, state: Value, last_state: Option<Value>) -> Pod {
    let mut init = json!({"name": "init", "image": IMAGE});
    if sidecar {
        init["restartPolicy"] = json!("Always");
    }
    let failed = state.get("terminated").is_some_and(|t| t["exitCode"] != json!(0));
    let phase = if failed && !sidecar { "Failed" } else { "Pending" };
    let mut status_of_init = container("init", false, false, state);
    if let Some(last) = last_state {
        status_of_init["lastState"] = last;
        status_of_init["restartCount"] = json!(3);
    }
    pod_with(
        json!([init]),
        status(
            phase,
            conditions(false, "ContainersNotReady", false),
            json!([status_of_init]),
            json!([container("web", false, false, waiting("PodInitializing", None))]),
        ),
    )
}

pub(crate) fn init_exited(code: i32) -> Value {
    terminated(code, if code == 0 { "Completed" } else { "Error" }, None)
}

/// A sidecar backing off after a crash: its state, and the run that crashed.
pub(crate) fn crash_loop(code: i32) -> (Value, Value) {
    let state = waiting(
        "CrashLoopBackOff",
        Some(
            "back-off 10s restarting failed container=init pod=stack-00000000000000aa_stacks(7d3c9a56-1d4e-4c55-9a8e-2f4b8e0c1a11)",
        ),
    );
    (state, terminated(code, "Error", None))
}

/// Refused by the kubelet's admission (`rejectPod`): phase Failed, the predicate as reason.
pub(crate) fn rejected(reason: &str, message: &str) -> Pod {
    pod(json!({
        "phase": "Failed",
        "reason": reason,
        "message": format!("Pod was rejected: {message}"),
        "startTime": AT,
        "qosClass": "Guaranteed"
    }))
}

/// Evicted by the kubelet's eviction manager.
pub(crate) fn evicted(message: &str) -> Pod {
    let mut status = status(
        "Failed",
        conditions(false, "PodFailed", true),
        json!([]),
        json!([container(
            "web",
            false,
            false,
            terminated(
                137,
                "ContainerStatusUnknown",
                Some("The container could not be located when the pod was terminated")
            )
        )]),
    );
    status["reason"] = json!("Evicted");
    status["message"] = json!(message);
    pod(status)
}

/// Bound to its node, the kubelet has not written a status yet.
pub(crate) fn just_bound() -> Pod {
    pod(
        json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": AT}], "qosClass": "Guaranteed"}),
    )
}
