//! The stack store against DynamoDB Local: a record and its manifest (kept in an item of their
//! own) are written, read and removed together. Needs `tests/env/up`.

use jiff::{SignedDuration, Timestamp};
use stack_core::model::StackId;
use stack_core::store::{Manifest, Store, StoreError};
use stack_tests::env::TestEnv;
use stack_tests::reconciler::running_record;

#[tokio::test]
async fn record_and_manifest_are_written_read_and_removed_together() {
    let env = TestEnv::connect().await.expect("local environment (run tests/env/up)");
    let table = env.fresh_table("store").await.expect("fresh table");
    let store = Store::new(env.dynamodb.clone(), table.name(), true);
    let id = StackId::generate();
    let ttl = Timestamp::now() + SignedDuration::from_hours(1);
    let record = running_record(&id, "stacks", "node-1", Some("203.0.113.1"), ttl);
    store.put_new_stack(&record).await.unwrap();

    let full = store.get_stack(&id, Manifest::Include).await.unwrap().unwrap();
    assert_eq!(full, record);
    let lean = store.get_stack(&id, Manifest::Omit).await.unwrap().unwrap();
    assert_eq!(lean.pod_spec, "");
    assert_eq!(lean.ports, record.ports);
    assert_eq!(
        store.list_stacks(Manifest::Include).await.unwrap(),
        vec![record.clone()]
    );
    assert_eq!(store.list_stacks(Manifest::Omit).await.unwrap(), vec![lean]);

    // The same id again is refused as a whole: the first manifest is not overwritten.
    let mut other = record.clone();
    other.pod_spec = "kind: Pod\nmetadata:\n  name: other\n".into();
    let again = store.put_new_stack(&other).await;
    assert!(matches!(again, Err(StoreError::ConditionFailed)), "{again:?}");
    let kept = store.get_stack(&id, Manifest::Include).await.unwrap().unwrap();
    assert_eq!(kept.pod_spec, record.pod_spec);
    assert_eq!(store.count_manifests().await.unwrap(), 1);

    store.delete_stack(&record).await.unwrap();
    assert_eq!(store.get_stack(&id, Manifest::Include).await.unwrap(), None);
    assert_eq!(store.count_manifests().await.unwrap(), 0);
    // Deleting what is gone succeeds.
    store.delete_stack(&record).await.unwrap();
    table.delete().await.unwrap();
}
