//! The reconciler as the scheduler invokes it: the scheduled event in, one pass against the
//! local cloud, its summary out. Two sandboxes invoked at once (a tick arriving while the last
//! one still runs) share the table's lease: one works, the other says it skipped.

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use stack_core::StackId;
use stack_tests::api::{ApiHarness, WEB_POD};
use stack_tests::lambda::{LambdaFunction, Sandbox};
use stack_tests::reconciler::set_ttl;

use super::local;

const SCHEDULED_EVENT: &str = include_str!("../../../../events/scheduled.json");

async fn tick(sandbox: &Sandbox) -> Value {
    let invocation = sandbox.invoke(SCHEDULED_EVENT.as_bytes()).await.expect("invoked");
    assert_eq!(invocation.status, 200, "{}\n{}", invocation.text(), sandbox.log());
    invocation.json().expect("the pass's summary")
}

/// Stacks the overlapping passes find expired: enough work that the pass holding the lease
/// still runs when the other tick arrives, however busy the machine.
const EXPIRED_AT_THE_OVERLAP: usize = 16;

async fn expire(api: &ApiHarness, ids: &[StackId]) {
    let an_hour_ago = Timestamp::now() - SignedDuration::from_hours(1);
    for id in ids {
        set_ttl(api.state.stacks.store(), id, an_hour_ago)
            .await
            .expect("expired");
    }
}

fn stack_ids(ids: Vec<String>) -> Vec<StackId> {
    ids.iter().map(|id| id.parse().expect("a stack id")).collect()
}

#[tokio::test]
async fn a_scheduled_tick_runs_one_pass_and_overlapping_ticks_share_the_lease() {
    let api = ApiHarness::start().await;
    let created = api.create(WEB_POD, serde_json::json!(80)).await;
    assert_eq!(created.status, 201, "{}", created.json);
    expire(
        &api,
        &stack_ids(vec![created.json["stack_id"].as_str().unwrap_or_default().to_owned()]),
    )
    .await;

    let function = local(LambdaFunction::Reconciler, &api.env, api.table.name(), &api.namespace);
    let first = function.start().await.expect("a sandbox");
    let summary = tick(&first).await;
    assert_eq!(summary["lease_held"], true, "{summary}");
    assert_eq!(summary["expired"], 1, "the expired stack ended: {summary}");
    assert_eq!(summary["failures"], 0, "{summary}");
    assert!(api.records().await.is_empty(), "its record is gone");

    // A second sandbox, warmed up: both then take a tick at the same moment.
    let second = function.start().await.expect("another sandbox");
    assert_eq!(tick(&second).await["lease_held"], true);
    expire(&api, &stack_ids(api.create_stacks(EXPIRED_AT_THE_OVERLAP).await)).await;
    let (one, other) = tokio::join!(tick(&first), tick(&second));
    let (held, skipped) = if one["lease_held"] == true {
        (&one, &other)
    } else {
        (&other, &one)
    };
    assert_eq!(held["lease_held"], true, "one pass ran: {one} {other}");
    assert_eq!(held["expired"], EXPIRED_AT_THE_OVERLAP, "and did the work: {held}");
    assert_eq!(skipped["lease_held"], false, "the other skipped: {one} {other}");
    assert_eq!(skipped["expired"], 0, "{skipped}");
    // The lease was given back: the next tick works.
    assert_eq!(tick(&second).await["lease_held"], true);

    first.stop().await;
    second.stop().await;
    api.finish().await;
}
