//! Waiting for a stack's pod to change, by a watch that starts at the version already held.
//!
//! kube-runtime's `await_condition` lists before it watches. Since Kubernetes 1.31 such a list
//! is served from the apiserver's watch cache once the cache has caught up with etcd's latest
//! revision; when that revision belongs to another resource (the stack's own service, a
//! lease), the cache waits for an etcd progress notification, which it requests every 100 ms
//! (on the local apiserver, a list right after a write elsewhere took ~50 ms instead of ~7).
//! The create already holds the pod it wrote, so it watches from there: one call, no list.

use std::pin::pin;
use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{WatchEvent, WatchParams};
use kube::{Api, ResourceExt};
use tokio::time::Instant;

use super::ClusterError;

/// The pod once `done` holds for it, or as last seen when `budget` runs out; `NotFound` when
/// it is deleted meanwhile. One watch follows every change until then.
pub(super) async fn until(
    pods: &Api<Pod>,
    seen: Pod,
    budget: Duration,
    done: impl Fn(&Pod) -> bool,
) -> Result<Pod, ClusterError> {
    let deadline = Instant::now() + budget;
    let mut latest = seen;
    while !done(&latest) {
        // `follow` updates `latest` as it goes: what it saw is kept when time runs out.
        match tokio::time::timeout_at(deadline, follow(pods, &mut latest, &done)).await {
            Err(_elapsed) => break,
            Ok(followed) => followed?,
        }
    }
    Ok(latest)
}

/// Watches the pod from the version in `latest`, keeping each new version there, until `done`
/// holds. A watch the server ends (its timeout) or cannot serve (the version is too old: 410)
/// ends with a fresh read instead.
async fn follow(pods: &Api<Pod>, latest: &mut Pod, done: &impl Fn(&Pod) -> bool) -> Result<(), ClusterError> {
    let name = latest.name_any();
    let params = WatchParams::default().fields(&format!("metadata.name={name}"));
    let version = latest
        .resource_version()
        .ok_or(ClusterError::Incomplete("pod resourceVersion"))?;
    let events = pods
        .watch(&params, &version)
        .await
        .map_err(|e| ClusterError::from_kube("watch pod", e))?;
    let mut events = pin!(events);
    while let Some(event) = events
        .try_next()
        .await
        .map_err(|e| ClusterError::from_kube("watch pod", e))?
    {
        match event {
            WatchEvent::Added(pod) | WatchEvent::Modified(pod) => {
                *latest = pod;
                if done(latest) {
                    return Ok(());
                }
            }
            WatchEvent::Deleted(_) => return Err(ClusterError::NotFound),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(status) => {
                tracing::debug!(pod = %name, ?status, "pod watch ended, reading the pod again");
                break;
            }
        }
    }
    *latest = pods
        .get_opt(&name)
        .await
        .map_err(|e| ClusterError::from_kube("get pod", e))?
        .ok_or(ClusterError::NotFound)?;
    Ok(())
}
