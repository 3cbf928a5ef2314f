//! The stack store against DynamoDB Local: a record and its manifest (kept in an item of their
//! own, compressed) are written, read and removed together; stacks page oldest first. Through
//! the API: manifests at the validator's limits are stored whole or refused before anything
//! exists, and a page of large stacks stays under the byte bound (here rather than in api.rs,
//! whose tests run concurrently and include timing-sensitive ones). Needs `tests/env/up`.

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use http::Method;
use jiff::{SignedDuration, Timestamp};
use serde_json::json;
use stack_core::{
    IdempotencyClaim, ListCursor, MAX_ITEM_BYTES, Manifest, ObservedState, StackId, StackStatus, StackUsage, Store,
    StoreError, StoredManifest, UnstorableManifest,
};
use stack_tests::api::{ApiHarness, listed_ids};
use stack_tests::env::{TableDefinition, TestEnv, TestTable};
use stack_tests::manifests::{noise, put_plain_manifest};
use stack_tests::reconciler::{running_record, set_stored_attribute, set_stored_status, stored_key};

/// A store over a fresh table of the local environment; the caller deletes the table.
async fn fresh_store() -> (TestTable, Store) {
    let env = TestEnv::connect().await.expect("local environment (run tests/env/up)");
    let table = env.fresh_table("store").await.expect("fresh table");
    let store = Store::new(env.dynamodb.clone(), table.name(), true);
    (table, store)
}

/// A test record's expiry: far enough that nothing expires during a test.
fn in_an_hour() -> Timestamp {
    Timestamp::now() + SignedDuration::from_hours(1)
}

#[tokio::test]
async fn record_and_manifest_are_written_read_and_removed_together() {
    let (table, store) = fresh_store().await;
    let id = StackId::generate();
    let ttl = in_an_hour();
    let record = running_record(&id, "stacks", "node-1", Some("203.0.113.1"), ttl);
    store.put_new_stack(&record).await.unwrap();

    let full = store.get_stack(&id, Manifest::Include).await.unwrap().unwrap();
    assert_eq!(full, record);
    let lean = store.get_stack(&id, Manifest::Omit).await.unwrap().unwrap();
    assert_eq!(lean.pod_spec, "");
    assert_eq!(lean.ports, record.ports);
    assert_eq!(
        store.list_stacks(Manifest::Include).await.unwrap().records,
        vec![record.clone()]
    );
    assert_eq!(store.list_stacks(Manifest::Omit).await.unwrap().records, vec![lean]);

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

#[tokio::test]
async fn manifests_written_before_compression_still_read() {
    let (table, store) = fresh_store().await;
    let id = StackId::generate();
    let ttl = in_an_hour();
    let mut record = running_record(&id, "stacks", "node-1", Some("203.0.113.1"), ttl);
    store.put_new_stack(&record).await.unwrap();
    // As the previous version wrote it: the manifest as a plain string attribute.
    record.pod_spec = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: \"old é\"\n".into();
    put_plain_manifest(&store, &id, &record.pod_spec).await.unwrap();

    assert_eq!(
        store.get_stack(&id, Manifest::Include).await.unwrap(),
        Some(record.clone())
    );
    assert_eq!(
        store.list_stacks(Manifest::Include).await.unwrap().records,
        vec![record.clone()]
    );
    assert_eq!(
        store.get_stacks(std::slice::from_ref(&id)).await.unwrap(),
        vec![record.clone()]
    );
    store.delete_stack(&record).await.unwrap();
    assert_eq!(store.count_manifests().await.unwrap(), 0);
    table.delete().await.unwrap();
}

#[tokio::test]
async fn the_largest_manifest_encode_accepts_is_one_dynamodb_stores() {
    let (table, store) = fresh_store().await;
    // Incompressible text: the longest whose item still fits, found by bisection.
    let text = noise(MAX_ITEM_BYTES * 2, 7);
    let (mut fits, mut too_long) = (MAX_ITEM_BYTES / 2, text.len());
    while too_long - fits > 1 {
        let mid = (fits + too_long) / 2;
        match StoredManifest::encode(&text[..mid]) {
            Ok(_) => fits = mid,
            Err(UnstorableManifest::TooLarge { .. }) => too_long = mid,
            Err(other) => panic!("{other}"),
        }
    }
    let largest = StoredManifest::encode(&text[..fits]).unwrap();
    assert!(largest.item_bytes() > MAX_ITEM_BYTES - 64, "{}", largest.item_bytes());

    let id = StackId::generate();
    let ttl = in_an_hour();
    let mut record = running_record(&id, "stacks", "node-1", None, ttl);
    record.pod_spec = text[..fits].to_owned();
    store.put_new_stack(&record).await.unwrap();
    assert_eq!(
        store.get_stack(&id, Manifest::Include).await.unwrap(),
        Some(record.clone())
    );

    // One byte more is refused by the store itself, as a client error, and nothing is written.
    let mut other = running_record(&StackId::generate(), "stacks", "node-1", None, ttl);
    other.pod_spec = text[..too_long].to_owned();
    let refused = store.put_new_stack(&other).await;
    assert!(matches!(refused, Err(StoreError::Unstorable(_))), "{refused:?}");
    assert_eq!(store.list_stacks(Manifest::Omit).await.unwrap().records.len(), 1);
    table.delete().await.unwrap();
}

#[tokio::test]
async fn stack_keys_page_oldest_first_and_each_once() {
    let (table, store) = fresh_store().await;
    let ttl = in_an_hour();
    let start = Timestamp::now() - SignedDuration::from_hours(1);
    let mut records = Vec::new();
    // Written newest first, with a whole second and a tie among them.
    for minutes in [6, 5, 4, 3, 3, 2, 1] {
        let id = StackId::generate();
        let mut record = running_record(&id, "stacks", "node-1", None, ttl);
        record.created_at = Timestamp::from_second(start.as_second()).unwrap() + SignedDuration::from_mins(minutes);
        if minutes != 4 {
            record.created_at += SignedDuration::from_micros(22);
        }
        store.put_new_stack(&record).await.unwrap();
        records.push(record);
    }
    records.sort_by_key(|r| r.created_at);

    let mut seen = Vec::new();
    let mut after: Option<ListCursor> = None;
    let mut pages = 0;
    loop {
        let (keys, more) = store.list_stack_keys(after.as_ref(), 3).await.unwrap();
        pages += 1;
        assert!(keys.len() <= 3);
        let ids: Vec<StackId> = keys.iter().map(|k| k.stack_id().clone()).collect();
        let page = store.get_stacks(&ids).await.unwrap();
        assert_eq!(page.iter().map(|r| r.stack_id.clone()).collect::<Vec<_>>(), ids);
        seen.extend(page);
        if !more {
            break;
        }
        // As a client hands it back.
        after = Some(ListCursor::decode(&keys.last().unwrap().encode()).unwrap());
    }
    assert_eq!(pages, 3);
    let created: Vec<Timestamp> = seen.iter().map(|r| r.created_at).collect();
    assert!(created.is_sorted(), "{created:?}");
    let mut seen_ids: Vec<&StackId> = seen.iter().map(|r| &r.stack_id).collect();
    seen_ids.sort();
    let mut all_ids: Vec<&StackId> = records.iter().map(|r| &r.stack_id).collect();
    all_ids.sort();
    assert_eq!(seen_ids, all_ids, "every stack exactly once");
    assert_eq!(seen.len(), records.len());
    // A full last page says no more follow; an empty table lists nothing.
    assert!(!store.list_stack_keys(None, 7).await.unwrap().1);
    for record in &records {
        store.delete_stack(record).await.unwrap();
    }
    assert_eq!(store.list_stack_keys(None, 7).await.unwrap(), (vec![], false));
    table.delete().await.unwrap();
}

#[tokio::test]
async fn a_page_of_large_manifests_stays_under_the_byte_bound() {
    let api = ApiHarness::start().await;
    let ids = api.create_stacks(12).await;
    // Manifests of 350 kB, quote- and line-heavy (each quote takes 4 bytes once the JSON body
    // is embedded in the Lambda response), written as stored before compression.
    let line = "        - name: \"QUOTED\"\n          value: \"a \\\"b\\\" c\"\n";
    let large = line.repeat(350_000 / line.len());
    let store = api.state.stacks.store();
    for id in &ids {
        stack_tests::manifests::put_plain_manifest(store, &id.parse().unwrap(), &large)
            .await
            .unwrap();
    }

    let pages = api.walk_pages(None).await;
    let oldest_first: Vec<String> = api.record_ids().await;
    assert_eq!(listed_ids(&pages), oldest_first, "each stack once, oldest first");
    assert!(pages.len() >= 2, "12 stacks of this size cannot fit one page");
    let mut total = 0;
    for page in &pages {
        let body = page.json.to_string();
        // What the function returns to Lambda: the body as a JSON string in the response.
        let payload = serde_json::to_string(&body).unwrap().len();
        total += payload;
        println!(
            "page of {} stacks: body {} bytes, payload {payload} bytes",
            page.json["stacks"].as_array().unwrap().len(),
            body.len()
        );
        assert!(payload <= 4 * 1024 * 1024 + 1024, "payload {payload} bytes");
        for stack in page.json["stacks"].as_array().unwrap() {
            assert_eq!(stack["pod_spec"], large.as_str());
        }
    }
    assert!(
        total > 6_000_000,
        "the stacks together would pass Lambda's limit: {total}"
    );
    api.finish().await;
}

#[tokio::test]
async fn manifests_at_the_validator_limits_are_stored_whole_or_refused_before_anything_exists() {
    use stack_tests::manifests::{ENV_ENTRIES, ENV_VALUE_BYTES, alias_env_pod, noise, prose};
    let api = ApiHarness::start().await;
    for (content, manifest) in [
        ("prose", alias_env_pod(|i| prose(ENV_VALUE_BYTES, i))),
        ("noise", alias_env_pod(|i| noise(ENV_VALUE_BYTES, i as u64 + 1))),
    ] {
        assert!(manifest.len() <= 256 * 1024, "{content}: {} bytes", manifest.len());
        assert!(manifest.len() > 250 * 1024, "{content}: at the limit");
        let cluster_calls = api.calls.snapshot().kube_total();
        let created = api.create(&manifest, json!(80)).await;
        match created.status {
            201 => {
                let id = created.stack_id();
                let pod_spec = created.json["pod_spec"].as_str().unwrap();
                // Hardened, with both containers' env spelled out: larger than the input.
                assert!(pod_spec.len() > 2 * ENV_ENTRIES * ENV_VALUE_BYTES, "{content}");
                let got = api.call(Method::GET, &format!("/stacks/{id}"), None).await;
                assert_eq!(got.status, 200, "{content}");
                assert!(
                    got.json["pod_spec"] == created.json["pod_spec"],
                    "{content}: read back differs"
                );
                let listed = api.call(Method::GET, "/stacks", None).await;
                assert!(
                    listed.json["stacks"][0]["pod_spec"] == created.json["pod_spec"],
                    "{content}: listed differs"
                );
                println!("{content}: stored, {} bytes hardened", pod_spec.len());
                api.delete_stack(&id).await;
            }
            400 => {
                let message = created.error();
                assert!(
                    message.starts_with("invalid pod spec: manifest is"),
                    "{content}: {message}"
                );
                // Refused before the cluster was asked anything.
                assert_eq!(
                    api.calls.snapshot().kube_total(),
                    cluster_calls,
                    "{content}: cluster called"
                );
                println!("{content}: refused: {message}");
            }
            other => panic!("{content}: {other} {}", created.json),
        }
        // Compressible content at the limits is always kept.
        if content == "prose" {
            assert_eq!(created.status, 201, "{}", created.json);
        }
        api.assert_nothing_left().await;
    }
    api.finish().await;
}

/// Usage as a sorted list, to compare what the index holds with the records (it has no ids).
fn usage_of(usage: impl IntoIterator<Item = StackUsage>) -> Vec<String> {
    let mut usage: Vec<String> = usage.into_iter().map(|u| format!("{u:?}")).collect();
    usage.sort();
    usage
}

#[tokio::test]
async fn the_usage_index_follows_creates_updates_and_deletes() {
    let (table, store) = fresh_store().await;
    let ttl = in_an_hour();
    // Enough stacks that every one of the 16 id ranges the index is read in holds some.
    let mut records = Vec::new();
    for i in 0..64_u16 {
        let mut record = running_record(&StackId::generate(), "stacks", &format!("node-{}", i % 3), None, ttl);
        record.requested_cpu_milli = i64::from(i);
        record.ports[0].node_port = 31001 + i;
        if i % 4 == 0 {
            record.status = StackStatus::Creating;
            record.node_id = String::new();
        }
        store.put_new_stack(&record).await.unwrap();
        records.push(record);
    }
    // An idempotency claim also carries a stack_id; it is no stack.
    let claimed = records[0].stack_id.clone();
    let claim = IdempotencyClaim {
        body_sha256: "0".repeat(64),
        stack_id: claimed,
        claimed_at: Timestamp::now(),
    };
    let held = store.claim_idempotency_key("key-1", &claim, ttl).await.unwrap();
    assert_eq!(held, None);
    assert_eq!(
        usage_of(store.list_stack_usage().await.unwrap()),
        usage_of(records.iter().map(StackUsage::from))
    );

    // A status written back shows; a deleted stack is gone.
    let observed = ObservedState {
        status: StackStatus::Stopped,
        node_id: "node-9".into(),
        node_public_ip: None,
        failure: None,
    };
    store
        .update_observed(&records[1].stack_id, &observed, Timestamp::now())
        .await
        .unwrap();
    records[1].status = StackStatus::Stopped;
    records[1].node_id = "node-9".into();
    let deleted = records.remove(2);
    store.delete_stack(&deleted).await.unwrap();
    assert_eq!(
        usage_of(store.list_stack_usage().await.unwrap()),
        usage_of(records.iter().map(StackUsage::from))
    );
    table.delete().await.unwrap();
}

#[tokio::test]
async fn usage_is_read_from_the_records_while_the_index_is_missing() {
    // A table deployed before the index was added (or while DynamoDB still fills it).
    let env = TestEnv::connect().await.expect("local environment (run tests/env/up)");
    let mut definition = TableDefinition::stack_table().expect("template.yaml");
    definition.global_secondary_indexes.retain(|i| i.index_name != "usage");
    definition
        .attribute_definitions
        .retain(|a| a.attribute_name != "stack_id");
    let table = TestTable::create_with(&env.dynamodb, "store", &definition)
        .await
        .expect("table without the usage index");
    let store = Store::new(env.dynamodb.clone(), table.name(), true);
    let ttl = in_an_hour();
    let record = running_record(&StackId::generate(), "stacks", "node-1", None, ttl);
    store.put_new_stack(&record).await.unwrap();
    assert_eq!(store.list_stack_usage().await.unwrap(), vec![StackUsage::from(&record)]);
    table.delete().await.unwrap();
}

#[tokio::test]
async fn a_stack_whose_record_or_manifest_does_not_read_is_left_out_and_named() {
    let (table, store) = fresh_store().await;
    let ttl = in_an_hour();
    let [good, bad_record, bad_manifest] =
        [0, 1, 2].map(|_| running_record(&StackId::generate(), "stacks", "node-1", None, ttl));
    for record in [&good, &bad_record, &bad_manifest] {
        store.put_new_stack(record).await.unwrap();
    }
    set_stored_status(&store, &bad_record.stack_id, "paused").await.unwrap();
    let not_zstd = AttributeValue::B(Blob::new(b"not zstd".to_vec()));
    set_stored_attribute(&store, "MANIFEST", &bad_manifest.stack_id, "pod_spec", not_zstd)
        .await
        .unwrap();

    let listing = store.list_stacks(Manifest::Omit).await.unwrap();
    let listed: Vec<&StackId> = listing.records.iter().map(|r| &r.stack_id).collect();
    assert_eq!(listed.len(), 2);
    assert!(!listed.contains(&&bad_record.stack_id), "{listed:?}");
    let unreadable: Vec<(&str, &str)> = listing
        .unreadable
        .iter()
        .map(|u| (u.pk.as_str(), u.sk.as_str()))
        .collect();
    assert_eq!(unreadable, vec![("STACK", bad_record.stack_id.as_str())]);

    let ids = [
        good.stack_id.clone(),
        bad_record.stack_id.clone(),
        bad_manifest.stack_id.clone(),
    ];
    assert_eq!(store.get_stacks(&ids).await.unwrap(), vec![good.clone()]);
    let usage = store.list_stack_usage().await.unwrap();
    assert_eq!(usage.len(), 2, "{usage:?}");
    let one = store.get_stack(&bad_record.stack_id, Manifest::Omit).await;
    assert!(
        matches!(&one, Err(StoreError::Unreadable(u)) if u.sk == bad_record.stack_id.as_str()),
        "{one:?}"
    );
    let spec = store.get_stack(&bad_manifest.stack_id, Manifest::Include).await;
    assert!(
        matches!(&spec, Err(StoreError::Unreadable(u)) if (u.pk.as_str(), u.sk.as_str()) == ("MANIFEST", bad_manifest.stack_id.as_str())),
        "{spec:?}"
    );

    // The reconciler's other lists: an idempotency claim and a job that do not read.
    for (pk, sk) in [("IDEM", "key-garbled"), ("JOB", "job-0000000000000001")] {
        let mut item = stored_key(pk, &good.stack_id);
        item.insert("sk".into(), AttributeValue::S(sk.into()));
        item.insert("status".into(), AttributeValue::S("queued".into()));
        let put = store.client().put_item().table_name(store.table()).set_item(Some(item));
        put.send().await.unwrap();
    }
    assert_eq!(store.list_idempotency_claims().await.unwrap(), vec![]);
    assert_eq!(store.list_unfinished_jobs().await.unwrap(), vec![]);
    table.delete().await.unwrap();
}
