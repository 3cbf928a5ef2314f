//! The reconciler end to end against the real local environment: stacks made through the API
//! (or leaked objects seeded straight into the apiserver), then a production reconcile pass,
//! then exactly the expected pods, services and records left.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use http::Method;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};
use stack_core::{
    BatchDeleteJob, JobStatus, LEASE_NAME, MANAGED_BY_LABEL, MANAGED_BY_VALUE, ObservedState, StackId, StackStatus,
    Summary, new_job_id,
};
use stack_tests::api::{ApiHarness, listed_ids};
use stack_tests::env::{SimulatedNode, nodes, unique_name};
use stack_tests::reconciler::{
    TestReconciler, add_schedulable_node, minimal_pod, set_stored_status, set_ttl, stack_pod, stack_service,
    until_older_than, wait_gone, wait_pod_running,
};

/// Pods, services and records of the harness's namespace and table, by name, and how many
/// manifests are stored (one per record).
#[derive(Debug, Default, PartialEq, Eq)]
struct State {
    records: BTreeSet<String>,
    manifests: usize,
    pods: BTreeSet<String>,
    services: BTreeSet<String>,
}

impl State {
    async fn of(api: &ApiHarness) -> Self {
        let name = |meta: &kube::api::ObjectMeta| meta.name.clone().unwrap_or_default();
        Self {
            records: api.record_ids().await,
            manifests: api
                .state
                .stacks
                .store()
                .count_manifests()
                .await
                .expect("count manifests"),
            pods: api.managed_pods().await.iter().map(|p| name(&p.metadata)).collect(),
            services: api.managed_services().await.iter().map(|s| name(&s.metadata)).collect(),
        }
    }

    /// Complete stacks and nothing else.
    fn stacks(ids: &[&StackId]) -> Self {
        Self {
            records: ids.iter().map(|id| id.to_string()).collect(),
            manifests: ids.len(),
            pods: ids.iter().map(|id| id.pod_name()).collect(),
            services: ids.iter().map(|id| id.service_name()).collect(),
        }
    }
}

/// A harness with the defaults and a reconciler over it.
async fn harness_and_reconciler() -> (ApiHarness, TestReconciler) {
    let api = ApiHarness::start().await;
    let reconciler = TestReconciler::over(&api, &[]).await;
    (api, reconciler)
}

async fn create_stack(api: &ApiHarness) -> StackId {
    let reply = api.create_web().await;
    reply.json["stack_id"]
        .as_str()
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("no stack_id in {}", reply.json))
}

/// A stack whose record says `running` (the create's answer, or else a pass's write-back).
async fn running_stack(api: &ApiHarness, reconciler: &TestReconciler) -> StackId {
    let id = create_stack(api).await;
    wait_pod_running(&api.pods_api(), &id.pod_name()).await.unwrap();
    let settled = reconciler.pass().await;
    assert!(settled.counts.status_updates <= 1, "{settled:?}");
    let record = reconciler.record(&id).await;
    assert_eq!(record.status, StackStatus::Running);
    id
}

/// One pass ends the one drifted stack, and only it: `kept` is all that is left.
async fn drift_repaired_and_kept(api: &ApiHarness, reconciler: &TestReconciler, kept: &StackId) {
    let summary = reconciler.pass().await;
    assert_eq!(
        (summary.counts.drift, summary.counts.expired, summary.counts.failures),
        (1, 0, 0),
        "{summary:?}"
    );
    assert_eq!(State::of(api).await, State::stacks(&[kept]));
}

fn past() -> Timestamp {
    Timestamp::now() - SignedDuration::from_mins(1)
}

/// Only the counts a pass that did nothing may show.
fn idle(summary: &Summary) -> Summary {
    Summary {
        lease_held: summary.lease_held,
        scanned: summary.scanned,
        duration_ms: summary.duration_ms,
        ..Summary::default()
    }
}

#[tokio::test]
async fn expired_stack_is_removed_and_a_live_one_kept() {
    let (api, reconciler) = harness_and_reconciler().await;
    let (expired, live) = (create_stack(&api).await, create_stack(&api).await);
    set_ttl(reconciler.store(), &expired, past()).await.unwrap();

    let summary = reconciler.pass().await;
    assert!(summary.lease_held);
    assert_eq!(
        (
            summary.scanned,
            summary.counts.expired,
            summary.counts.drift,
            summary.counts.failures
        ),
        (2, 1, 0, 0)
    );
    assert_eq!(State::of(&api).await, State::stacks(&[&live]));
    api.finish().await;
}

#[tokio::test]
async fn stack_expires_after_a_short_ttl() {
    let api = ApiHarness::with_env(&[("STACK_TTL", "1s")]).await;
    let reconciler = TestReconciler::over(&api, &[]).await;
    let id = create_stack(&api).await;
    let record = reconciler.record(&id).await;
    // The TTL is the thing under test: wait for exactly that moment to pass.
    let left = Timestamp::now().duration_until(record.ttl_expires_at);
    if left.is_positive() {
        tokio::time::sleep(left.unsigned_abs() + Duration::from_millis(10)).await;
    }

    let summary = reconciler.pass().await;
    assert_eq!((summary.counts.expired, summary.counts.failures), (1, 0), "{summary:?}");
    api.finish_asserting_nothing_left().await;
}

#[tokio::test]
async fn status_changes_are_written_back_once() {
    let (api, reconciler) = harness_and_reconciler().await;
    let id = create_stack(&api).await;
    let pod = wait_pod_running(&api.pods_api(), &id.pod_name()).await.unwrap();
    // The record falls behind the cluster (as when a create answers before its pod starts).
    let stale = ObservedState {
        status: StackStatus::Creating,
        node_id: String::new(),
        node_public_ip: None,
        failure: None,
    };
    reconciler
        .store()
        .update_observed(&id, &stale, Timestamp::now())
        .await
        .unwrap();
    let before = reconciler.record(&id).await;
    assert_eq!(before.status, StackStatus::Creating);
    let node_name = pod.spec.and_then(|s| s.node_name).unwrap();
    let node = Api::<Node>::all(api.env.kube.clone()).get(&node_name).await.unwrap();

    let summary = reconciler.pass().await;
    assert_eq!(summary.counts.status_updates, 1, "{summary:?}");
    let after = reconciler.record(&id).await;
    assert_eq!(after.status, StackStatus::Running);
    assert_eq!(after.node_id, node_name);
    assert_eq!(after.node_public_ip, stack_core::node_external_ip(&node));
    assert!(after.updated_at > before.updated_at);
    // The pass reads records without their manifest; the write-back must not lose it.
    assert_eq!(after.pod_spec, before.pod_spec);
    assert!(!after.pod_spec.is_empty());

    // In sync now: the next pass writes nothing.
    let again = reconciler.pass().await;
    assert_eq!(again, idle(&again));
    let unchanged = reconciler.record(&id).await;
    assert_eq!(unchanged, after);
    assert_eq!(State::of(&api).await, State::stacks(&[&id]));
    api.finish().await;
}

#[tokio::test]
async fn stack_whose_pod_was_deleted_behind_our_back_loses_service_and_record() {
    let (api, reconciler) = harness_and_reconciler().await;
    let (lost, kept) = (running_stack(&api, &reconciler).await, create_stack(&api).await);
    // The service no longer names the pod as its owner, so the garbage collector leaves it
    // (orphan propagation alone races the collector's view of a just-created service):
    // removing it is the reconciler's job here.
    let disowned = json!({ "metadata": { "ownerReferences": null } });
    api.services_api()
        .patch(&lost.service_name(), &PatchParams::default(), &Patch::Merge(&disowned))
        .await
        .unwrap();
    let now_gone = DeleteParams::default().grace_period(0);
    api.pods_api().delete(&lost.pod_name(), &now_gone).await.unwrap();
    wait_gone(&api.pods_api(), &lost.pod_name()).await.unwrap();
    assert_eq!(api.managed_services().await.len(), 2, "the service outlived its pod");

    drift_repaired_and_kept(&api, &reconciler, &kept).await;
    api.finish().await;
}

#[tokio::test]
async fn stack_whose_service_was_deleted_loses_pod_and_record() {
    let (api, reconciler) = harness_and_reconciler().await;
    let (lost, kept) = (running_stack(&api, &reconciler).await, create_stack(&api).await);
    api.services_api()
        .delete(&lost.service_name(), &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&api.services_api(), &lost.service_name()).await.unwrap();

    drift_repaired_and_kept(&api, &reconciler, &kept).await;
    api.finish().await;
}

#[tokio::test]
async fn stack_whose_node_was_deleted_is_removed() {
    // Its own node role and node, so deleting the node touches no other test.
    let role = unique_name("recon");
    let api = ApiHarness::with_env(&[("STACK_NODE_ROLE", &role)]).await;
    let reconciler = TestReconciler::over(&api, &[]).await;
    let node = SimulatedNode::new(&format!("{role}-node"))
        .role(&role)
        .external_ip("203.0.113.201");
    add_schedulable_node(&api.env, &node).await.unwrap();
    let id = running_stack(&api, &reconciler).await;
    let record = reconciler.record(&id).await;
    assert_eq!(
        (record.node_id.as_str(), record.node_public_ip.as_deref()),
        (node.name.as_str(), Some("203.0.113.201"))
    );

    nodes::delete_node(&api.env.kube, &node.name).await.unwrap();
    wait_gone(&Api::<Node>::all(api.env.kube.clone()), &node.name)
        .await
        .unwrap();
    let summary = reconciler.pass().await;
    assert_eq!((summary.counts.drift, summary.counts.failures), (1, 0), "{summary:?}");
    api.finish_asserting_nothing_left().await;
}

#[tokio::test]
async fn a_record_that_does_not_read_stops_neither_the_pass_nor_the_lists_and_its_stack_is_kept() {
    let api = ApiHarness::start().await;
    let (expired, garbled, live) = (
        create_stack(&api).await,
        create_stack(&api).await,
        create_stack(&api).await,
    );
    let eager = TestReconciler::over(&api, &[("STACK_ORPHAN_GRACE", "1s")]).await;
    set_ttl(eager.store(), &expired, past()).await.unwrap();
    // A status this version does not know: the record no longer reads.
    set_stored_status(eager.store(), &garbled, "paused").await.unwrap();
    let garbled_pod = api.pods_api().get(&garbled.pod_name()).await.unwrap();
    // Old enough that, taken for an orphan, its pod would go.
    until_older_than(&garbled_pod.metadata, Duration::from_secs(2)).await;

    let summary = eager.pass().await;
    assert_eq!(
        (
            summary.scanned,
            summary.counts.expired,
            summary.counts.orphans,
            summary.counts.failures
        ),
        (2, 1, 0, 1),
        "{summary:?}"
    );
    // Its pod and service are kept, neither record is touched, the expired stack is gone.
    let state = State::of(&api).await;
    assert_eq!(state.records, BTreeSet::from([live.to_string()]));
    assert_eq!(state.manifests, 2);
    assert_eq!(state.pods, BTreeSet::from([garbled.pod_name(), live.pod_name()]));
    assert_eq!(
        state.services,
        BTreeSet::from([garbled.service_name(), live.service_name()])
    );

    // The platform still lists and the operator still sees /stats.
    let pages = api.walk_pages(None).await;
    assert_eq!(listed_ids(&pages), vec![live.to_string()]);
    let stats = api.call(Method::GET, "/stats", None).await;
    assert_eq!(stats.status, 200, "{}", stats.json);

    // Repaired, it is a stack like the others again.
    set_stored_status(eager.store(), &garbled, "running").await.unwrap();
    let repaired = eager.pass().await;
    assert_eq!((repaired.scanned, repaired.counts.failures), (2, 0), "{repaired:?}");
    assert_eq!(State::of(&api).await, State::stacks(&[&garbled, &live]));

    // Garbled again, the platform can still delete it: pod, service and items go.
    set_stored_status(eager.store(), &garbled, "paused").await.unwrap();
    api.delete_stack(garbled.as_str()).await;
    wait_gone(&api.pods_api(), &garbled.pod_name()).await.unwrap();
    assert_eq!(State::of(&api).await, State::stacks(&[&live]));
    let after = eager.pass().await;
    assert_eq!((after.scanned, after.counts.failures), (1, 0), "{after:?}");
    api.finish().await;
}

/// Creates `pods`, which lack our managed-by label, in the harness's namespace. The stack
/// namespace's admission policy refuses such pods, so they stand for pods made before it was
/// applied: they are created while the namespace briefly lacks the label its binding selects.
async fn create_unguarded(api: &ApiHarness, pods: &[&Pod]) {
    let namespaces = Api::<Namespace>::all(api.env.kube.clone());
    let label = |value: Value| json!({"metadata": {"labels": {MANAGED_BY_LABEL: value}}});
    let relabel = |value: Value| {
        let namespaces = namespaces.clone();
        async move {
            namespaces
                .patch(&api.namespace, &PatchParams::default(), &Patch::Merge(&label(value)))
                .await
                .expect("relabel the namespace");
        }
    };
    relabel(Value::Null).await;
    for pod in pods {
        // The admission plugin reads namespaces from its cache: it may not see the change yet.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match api.pods_api().create(&PostParams::default(), pod).await {
                Ok(_) => break,
                Err(kube::Error::Api(status)) if status.code == 422 && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => panic!("create {:?}: {error}", pod.metadata.name),
            }
        }
    }
    relabel(json!(MANAGED_BY_VALUE)).await;
}

/// One pass of a reconciler whose orphan grace is `grace`: it deletes `orphans` orphans, and
/// sees no drift and no failure.
async fn pass_deletes_orphans(api: &ApiHarness, grace: &str, orphans: usize) {
    let summary = TestReconciler::over(api, &[("STACK_ORPHAN_GRACE", grace)])
        .await
        .pass()
        .await;
    assert_eq!(
        (summary.counts.orphans, summary.counts.drift, summary.counts.failures),
        (orphans, 0, 0),
        "{summary:?}"
    );
}

#[tokio::test]
async fn old_orphans_are_deleted_young_ones_and_foreign_pods_kept() {
    let api = ApiHarness::start().await;
    // Makes the namespace, and a stack whose claimed objects must survive every pass.
    let claimed = create_stack(&api).await;
    let node = nodes::default_nodes()[0].name.clone();
    let create = PostParams::default();
    let orphan = StackId::generate();
    let orphan_pod = api
        .pods_api()
        .create(&create, &stack_pod(&orphan, &node))
        .await
        .unwrap();
    let orphan_service = api
        .services_api()
        .create(&create, &stack_service(&orphan, Some(&orphan_pod)))
        .await
        .unwrap();
    let unlabelled = minimal_pod("unlabelled", BTreeMap::new(), &node);
    let foreign_labels = BTreeMap::from([(MANAGED_BY_LABEL.to_owned(), "helm".to_owned())]);
    let foreign = minimal_pod("managed-by-helm", foreign_labels, &node);
    create_unguarded(&api, &[&unlabelled, &foreign]).await;
    let with_orphan = State {
        pods: BTreeSet::from([claimed.pod_name(), orphan.pod_name()]),
        services: BTreeSet::from([claimed.service_name(), orphan.service_name()]),
        ..State::stacks(&[&claimed])
    };

    // Younger than the grace: possibly a create still in progress, left alone.
    pass_deletes_orphans(&api, "1h", 0).await;
    assert_eq!(State::of(&api).await, with_orphan);

    // Older than the grace: leaked, deleted (pod and service, each an orphan of its own).
    // The service was made last, possibly a second after the pod.
    until_older_than(&orphan_service.metadata, Duration::from_secs(1)).await;
    pass_deletes_orphans(&api, "1s", 2).await;
    assert_eq!(State::of(&api).await, State::stacks(&[&claimed]));
    // Pods without our exact managed-by label are never ours to delete.
    for name in ["unlabelled", "managed-by-helm"] {
        let pod: Option<Pod> = api.pods_api().get_opt(name).await.unwrap();
        assert!(
            pod.is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
            "{name} was deleted"
        );
    }
    api.finish().await;
}

#[tokio::test]
async fn only_one_pass_runs_at_a_time() {
    let api = ApiHarness::start().await;
    // Two sandboxes with clients of their own.
    let first = TestReconciler::over(&api, &[]).await;
    let second = TestReconciler::over(&api, &[]).await;
    let store = first.store();
    let id = create_stack(&api).await;
    set_ttl(store, &id, past()).await.unwrap();

    // Someone else holds the lease: the pass does nothing and says so.
    let now = Timestamp::now();
    assert!(
        store
            .try_acquire_lease(LEASE_NAME, "other-sandbox", Duration::from_secs(60), now)
            .await
            .unwrap()
    );
    let skipped = first.pass().await;
    assert!(!skipped.lease_held);
    assert_eq!(
        skipped,
        Summary {
            lease_held: false,
            duration_ms: skipped.duration_ms,
            ..Summary::default()
        }
    );
    assert_eq!(State::of(&api).await, State::stacks(&[&id]));
    assert!(store.release_lease(LEASE_NAME, "other-sandbox").await.unwrap());

    // A lease whose holder died is taken over once it lapses.
    let long_ago = now - SignedDuration::from_mins(10);
    assert!(
        store
            .try_acquire_lease(LEASE_NAME, "crashed-sandbox", Duration::from_secs(1), long_ago)
            .await
            .unwrap()
    );
    // Two passes started at once: one runs, the other finds the lease held.
    let (a, b) = tokio::join!(first.pass(), second.pass());
    assert_eq!(
        [a.lease_held, b.lease_held].iter().filter(|held| **held).count(),
        1,
        "{a:?} {b:?}"
    );
    let (ran, waited) = if a.lease_held { (a, b) } else { (b, a) };
    assert_eq!((ran.counts.expired, ran.counts.failures), (1, 0), "{ran:?}");
    assert_eq!(waited.counts.expired, 0);
    api.finish_asserting_nothing_left().await;
}

#[tokio::test]
async fn pass_out_of_time_stops_cleanly_and_the_next_one_finishes() {
    let (api, reconciler) = harness_and_reconciler().await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let id = create_stack(&api).await;
        set_ttl(reconciler.store(), &id, past()).await.unwrap();
        ids.push(id);
    }

    let cut = reconciler
        .pass_until(Instant::now() + Duration::from_millis(1))
        .await
        .unwrap();
    assert!(cut.lease_held);
    assert_eq!(
        (
            cut.scanned,
            cut.counts.expired,
            cut.counts.remaining,
            cut.counts.failures
        ),
        (3, 0, 3, 0),
        "{cut:?}"
    );
    let refs: Vec<&StackId> = ids.iter().collect();
    assert_eq!(State::of(&api).await, State::stacks(&refs));

    // The lease was released on the way out: the next pass need not wait for it to lapse.
    let next = reconciler.pass().await;
    assert_eq!(
        (next.counts.expired, next.counts.remaining, next.counts.failures),
        (3, 0, 0),
        "{next:?}"
    );
    api.finish_asserting_nothing_left().await;
}

#[tokio::test]
async fn stalled_batch_delete_job_is_carried_to_completion() {
    let (api, reconciler) = harness_and_reconciler().await;
    let store = reconciler.store();
    let (doomed, listed_later) = (create_stack(&api).await, create_stack(&api).await);
    let unknown = "stack-0123456789abcdef".to_owned();
    let now = Timestamp::now();
    // Half done by an invocation that died a minute ago.
    let stalled = BatchDeleteJob {
        job_id: new_job_id(),
        status: JobStatus::Running,
        total: 3,
        deleted: 1,
        not_found: 0,
        failed: 0,
        errors: vec![],
        pending: vec![doomed.to_string(), unknown],
        created_at: now - SignedDuration::from_mins(2),
        updated_at: now - SignedDuration::from_mins(1),
        scope: Default::default(),
    };
    // Just accepted: its own invocation is still at it.
    let fresh = BatchDeleteJob {
        job_id: new_job_id(),
        status: JobStatus::Queued,
        total: 1,
        deleted: 0,
        pending: vec![listed_later.to_string()],
        created_at: now,
        updated_at: now,
        ..stalled.clone()
    };
    for job in [&stalled, &fresh] {
        store.put_new_job(job).await.unwrap();
    }

    let summary = reconciler.pass().await;
    assert_eq!((summary.counts.jobs, summary.counts.failures), (1, 0), "{summary:?}");
    let done = store.get_job(&stalled.job_id).await.unwrap().unwrap();
    assert_eq!(done.status, JobStatus::Completed);
    assert_eq!((done.total, done.deleted, done.not_found, done.failed), (3, 2, 1, 0));
    assert!(done.pending.is_empty() && done.errors.is_empty(), "{done:?}");
    assert_eq!(store.get_job(&fresh.job_id).await.unwrap().unwrap(), fresh);
    assert_eq!(State::of(&api).await, State::stacks(&[&listed_later]));
    api.finish().await;
}

#[tokio::test]
async fn scheduled_event_runs_one_pass_through_the_lambda_handler() {
    let (api, reconciler) = harness_and_reconciler().await;
    let id = create_stack(&api).await;
    set_ttl(reconciler.store(), &id, past()).await.unwrap();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../events/scheduled.json");
    let payload: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(payload["detail-type"], "Scheduled Event");
    let mut context = Context::default();
    context.request_id = "scheduled-test".into();
    context.deadline = u64::try_from((Timestamp::now() + SignedDuration::from_mins(1)).as_millisecond()).unwrap();

    let summary = stack_reconciler::handler::handle(&reconciler.reconciler, LambdaEvent::new(payload, context))
        .await
        .unwrap();
    // What the runtime sends back as the invocation's answer.
    let answer = serde_json::to_value(summary).unwrap();
    assert_eq!(answer["lease_held"], true, "{answer}");
    assert_eq!(
        (answer["scanned"].as_u64(), answer["expired"].as_u64()),
        (Some(1), Some(1)),
        "{answer}"
    );
    assert_eq!(answer["failures"], 0, "{answer}");
    api.finish_asserting_nothing_left().await;
}
