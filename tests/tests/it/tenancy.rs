//! Tenants and roles against the local cloud: three tenants configured as a deployment
//! configures them (`STACK_TENANTS`, `API_KEYS`), keys of every role, every route asked about
//! a stack of one's own and of another tenant.

use std::collections::HashSet;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use http::Method;
use serde_json::{Value, json};
use stack_core::TenantId;
use stack_tests::api::{API_KEY, ApiHarness, Reply, WEB_POD, refusals_of};
use stack_tests::reconciler::TestReconciler;
use stack_tests::tenants::{
    self, ALL_OPERATOR, ALL_VIEWER, CTF_OPERATOR, CTF_PLATFORM, CTF_PLATFORM_NEXT, KEYS, TestKey, UNI_PLATFORM,
    WARGAME_PLATFORM, WARGAME_VIEWER,
};

/// The id of a stack that never existed: what every route answers for it is what it must
/// answer for another tenant's stack.
const NEVER_EXISTED: &str = "stack-0123456789abcdef";

fn create_body() -> Value {
    json!({"pod_spec": WEB_POD, "target_port": [{"container_port": 80}]})
}

async fn create_as(api: &ApiHarness, key: &TestKey) -> String {
    let reply = api.call_as(key.key, Method::POST, "/stacks", Some(create_body())).await;
    assert_eq!(reply.status, 201, "{}", reply.json);
    reply.json["stack_id"].as_str().expect("stack_id").to_owned()
}

/// Every stack id a key's list shows, all pages.
async fn listed_by(api: &ApiHarness, key: &TestKey) -> HashSet<String> {
    let mut ids = HashSet::new();
    let mut cursor: Option<String> = None;
    for _ in 0..50 {
        let path = match &cursor {
            Some(c) => format!("/stacks?limit=1000&cursor={c}"),
            None => "/stacks?limit=1000".to_owned(),
        };
        let page = api.call_as(key.key, Method::GET, &path, None).await;
        assert_eq!(page.status, 200, "{}: {}", key.key, page.json);
        for stack in page.json["stacks"].as_array().expect("stacks") {
            ids.insert(stack["stack_id"].as_str().expect("id").to_owned());
        }
        cursor = page.json["next_cursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            return ids;
        }
    }
    panic!("pages never end");
}

/// What `key` gets for `method path` with the stack id `id` substituted.
async fn ask(api: &ApiHarness, key: &TestKey, method: &Method, path: &str, id: &str) -> Reply {
    api.call_as(key.key, method.clone(), &path.replace("{id}", id), None)
        .await
}

/// Each stack's expiry, by id.
async fn expiries(api: &ApiHarness) -> std::collections::HashMap<String, jiff::Timestamp> {
    api.records()
        .await
        .into_iter()
        .map(|r| (r.stack_id.to_string(), r.ttl_expires_at))
        .collect()
}

#[tokio::test]
async fn every_route_answers_a_key_of_another_tenant_as_if_the_stack_did_not_exist() {
    let api = ApiHarness::with_tenants(&[], &[]).await;
    let ctf = create_as(&api, &CTF_PLATFORM).await;
    let wargame = create_as(&api, &WARGAME_PLATFORM).await;
    let owners = [(&ctf, "ctf"), (&wargame, "wargame")];
    let routes = [
        (Method::GET, "/stacks/{id}"),
        (Method::GET, "/stacks/{id}/status"),
        (Method::POST, "/stacks/{id}/renew"),
    ];
    for key in &KEYS {
        for (method, path) in &routes {
            let absent = ask(&api, key, method, path, NEVER_EXISTED).await;
            for (id, tenant) in owners {
                let reply = ask(&api, key, method, path, id).await;
                let what = format!("{} {method} {path} on {tenant}'s stack", key.key);
                let allowed = *method == Method::GET || key.may_change();
                if !allowed {
                    assert_eq!(reply.status, 403, "{what}: {}", reply.json);
                } else if key.sees(tenant) {
                    assert_eq!(reply.status, 200, "{what}: {}", reply.json);
                } else {
                    // Not a 403: whether the stack exists is not revealed.
                    assert_eq!((reply.status, &reply.json), (absent.status, &absent.json), "{what}");
                    assert_eq!(reply.status, 404, "{what}");
                }
            }
        }
    }

    // Deletes of another tenant's stack answer 404 and leave it running.
    for key in [&CTF_PLATFORM, &CTF_OPERATOR, &UNI_PLATFORM] {
        let reply = ask(&api, key, &Method::DELETE, "/stacks/{id}", &wargame).await;
        assert_eq!(reply.status, 404, "{}: {}", key.key, reply.json);
    }
    for key in [&WARGAME_VIEWER, &ALL_VIEWER] {
        let reply = ask(&api, key, &Method::DELETE, "/stacks/{id}", &wargame).await;
        assert_eq!(reply.status, 403, "a viewer changes nothing: {}", reply.json);
    }
    let still = ask(&api, &WARGAME_PLATFORM, &Method::GET, "/stacks/{id}/status", &wargame).await;
    assert_eq!(still.status, 200, "{}", still.json);

    // Lists show exactly the stacks the key sees.
    for key in &KEYS {
        let listed = listed_by(&api, key).await;
        let expected: HashSet<String> = owners
            .iter()
            .filter(|(_, tenant)| key.sees(tenant))
            .map(|(id, _)| (*id).clone())
            .collect();
        assert_eq!(listed, expected, "{}'s list", key.key);
    }

    // Stats and history: operator and viewer keys only, counting only what the key sees.
    for key in &KEYS {
        let stats = api.call_as(key.key, Method::GET, "/stats", None).await;
        let history = api.call_as(key.key, Method::GET, "/history", None).await;
        if !key.may_observe() {
            assert_eq!((stats.status, history.status), (403, 403), "{}", key.key);
            continue;
        }
        assert_eq!(stats.status, 200, "{}: {}", key.key, stats.json);
        let visible = owners.iter().filter(|(_, t)| key.sees(t)).count();
        assert_eq!(stats.json["total_stacks"], visible, "{}: {}", key.key, stats.json);
        let text = stats.json.to_string();
        for (id, tenant) in owners {
            assert!(key.sees(tenant) || !text.contains(id.as_str()), "{} sees {id}", key.key);
        }
        if key.tenant == "*" {
            assert!(stats.json.get("tenant").is_none(), "{}", stats.json);
        } else {
            assert_eq!(stats.json["tenant"]["name"], key.tenant, "{}", stats.json);
            assert_eq!(history.json["passes"], json!([]), "{}", history.json);
        }
    }

    // Creates: platform keys only; a second key of a platform sees the first one's stacks.
    for key in [&CTF_OPERATOR, &WARGAME_VIEWER, &ALL_OPERATOR, &ALL_VIEWER] {
        let reply = api.call_as(key.key, Method::POST, "/stacks", Some(create_body())).await;
        assert_eq!(reply.status, 403, "{}: {}", key.key, reply.json);
    }
    let rotated = ask(&api, &CTF_PLATFORM_NEXT, &Method::GET, "/stacks/{id}", &ctf).await;
    assert_eq!(rotated.status, 200, "{}", rotated.json);
    let unknown = api.call_as("not-a-key", Method::GET, "/stacks", None).await;
    assert_eq!(unknown.status, 401, "{}", unknown.json);

    // Identity says who a key is.
    let me = api.call_as(WARGAME_VIEWER.key, Method::GET, "/identity", None).await;
    assert_eq!(
        (&me.json["role"], &me.json["tenant"], &me.json["may_change"]),
        (&json!("viewer"), &json!("wargame"), &json!(false))
    );
    api.finish().await;
}

#[tokio::test]
async fn a_batch_delete_removes_only_the_stacks_its_key_sees() {
    let api = ApiHarness::with_tenants(&[], &[]).await;
    let (ctf, wargame) = (
        create_as(&api, &CTF_PLATFORM).await,
        create_as(&api, &WARGAME_PLATFORM).await,
    );
    let body = json!({"stack_ids": [ctf, wargame]});
    for key in [&CTF_PLATFORM, &WARGAME_VIEWER, &ALL_VIEWER] {
        let reply = api
            .call_as(key.key, Method::POST, "/stacks/batch-delete", Some(body.clone()))
            .await;
        assert_eq!(reply.status, 403, "{}: {}", key.key, reply.json);
    }
    let started = api
        .call_as(CTF_OPERATOR.key, Method::POST, "/stacks/batch-delete", Some(body))
        .await;
    assert_eq!(started.status, 202, "{}", started.json);
    let job_path = format!(
        "/stacks/batch-delete/{}",
        started.json["job_id"].as_str().expect("job id")
    );
    let job = wait_job(&api, &CTF_OPERATOR, &job_path).await;
    assert_eq!((&job["deleted"], &job["not_found"]), (&json!(1), &json!(1)), "{job}");
    let survivor = ask(&api, &WARGAME_PLATFORM, &Method::GET, "/stacks/{id}/status", &wargame).await;
    assert_eq!(
        survivor.status, 200,
        "the other tenant's stack stays: {}",
        survivor.json
    );
    // The job is the ctf operator's: an operator of every tenant reads it; a job of every
    // tenant is not readable by a key of one.
    assert_eq!(
        api.call_as(ALL_OPERATOR.key, Method::GET, &job_path, None).await.status,
        200
    );
    let everyone = api
        .call_as(
            ALL_OPERATOR.key,
            Method::POST,
            "/stacks/batch-delete",
            Some(json!({"stack_ids": [NEVER_EXISTED]})),
        )
        .await;
    let everyone_path = format!(
        "/stacks/batch-delete/{}",
        everyone.json["job_id"].as_str().expect("job id")
    );
    let hidden = api.call_as(CTF_OPERATOR.key, Method::GET, &everyone_path, None).await;
    assert_eq!(hidden.status, 404, "{}", hidden.json);
    api.finish().await;
}

async fn wait_job(api: &ApiHarness, key: &TestKey, path: &str) -> Value {
    for _ in 0..100 {
        let job = api.call_as(key.key, Method::GET, path, None).await;
        assert_eq!(job.status, 200, "{}", job.json);
        if job.json["status"] == "completed" || job.json["status"] == "failed" {
            return job.json;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("batch delete did not finish");
}

#[tokio::test]
async fn a_tenants_limit_holds_under_a_burst_and_other_tenants_are_unaffected() {
    let api = ApiHarness::with_tenants(&[("ctf", 3)], &[("STACK_CREATE_CONCURRENCY", "32")]).await;
    let creates = (0..12)
        .map(|_| (&CTF_PLATFORM, "ctf"))
        .chain((0..4).map(|_| (&WARGAME_PLATFORM, "wargame")));
    let replies = futures::future::join_all(creates.map(|(key, tenant)| {
        let api = &api;
        async move {
            let reply = api.call_as(key.key, Method::POST, "/stacks", Some(create_body())).await;
            (tenant, reply)
        }
    }))
    .await;
    let mut admitted = 0;
    for (tenant, reply) in &replies {
        match (*tenant, reply.status) {
            ("ctf", 201) => admitted += 1,
            ("ctf", 503) => {
                assert!(reply.headers.contains_key("retry-after"), "503 without Retry-After");
                let message = reply.error();
                assert!(message.contains("tenant ctf holds its limit of 3"), "{message}");
            }
            ("wargame", 201) => {}
            (tenant, status) => panic!("{tenant} create answered {status}: {}", reply.json),
        }
    }
    // The burst fills the limit exactly: no more, and no slot lost to the race.
    assert_eq!(admitted, 3, "ctf stacks admitted with a limit of 3");
    let ctf_stacks = listed_by(&api, &CTF_PLATFORM).await;
    assert_eq!(ctf_stacks.len(), 3);
    let over = api
        .call_as(CTF_PLATFORM.key, Method::POST, "/stacks", Some(create_body()))
        .await;
    assert_eq!(over.status, 503, "{}", over.json);
    assert_eq!(listed_by(&api, &WARGAME_PLATFORM).await.len(), 4);

    // A deleted stack gives its slot back at once.
    let one = ctf_stacks.iter().next().expect("a ctf stack").clone();
    let deleted = ask(&api, &CTF_PLATFORM, &Method::DELETE, "/stacks/{id}", &one).await;
    assert_eq!(deleted.status, 200, "{}", deleted.json);
    create_as(&api, &CTF_PLATFORM).await;
    let store = api.state.stacks.store();
    let ctf = TenantId::parse("ctf").expect("tenant");
    let holds = store.list_tenant_holds(&ctf).await.expect("holds").len();
    let counted = store.tenant_held(&ctf).await.expect("counter");
    assert_eq!(
        (holds, counted),
        (3, Some(3)),
        "one hold per live ctf stack, none left by refused creates"
    );
    // A pass (configured as the API is) finds them in step.
    let settings = tenants::settings(&[("ctf", 3)]);
    let (tenants_var, keys_var) = (&settings[0].1, &settings[1].1);
    let reconciler = TestReconciler::over(&api, &[("STACK_TENANTS", tenants_var), ("API_KEYS", keys_var)]).await;
    let summary = reconciler.pass().await;
    assert_eq!((summary.counts.drift, summary.counts.orphans), (0, 0), "{summary:?}");
    let stats = api.call_as(CTF_OPERATOR.key, Method::GET, "/stats", None).await;
    assert_eq!(
        stats.json["tenant"],
        json!({"name": "ctf", "max_stacks": 3, "stacks": 3})
    );
    assert_eq!(stats.json["capacity"]["node_ports"]["free"], 0, "{}", stats.json);
    // The ten refusals are ctf's own history (counted in the background), not wargame's.
    let refused = |key: &'static TestKey| {
        let api = &api;
        async move {
            let history = api.call_as(key.key, Method::GET, "/history", None).await;
            refusals_of(&history.json, "tenant_limit")
        }
    };
    let mut seen = 0;
    for _ in 0..50 {
        seen = refused(&CTF_OPERATOR).await;
        if seen == 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(seen, 10, "ctf's refusals in its history");
    assert_eq!(refused(&ALL_OPERATOR).await, 10);
    assert_eq!(refused(&WARGAME_VIEWER).await, 0);
    api.finish().await;
}

#[tokio::test]
async fn the_same_idempotency_key_from_two_tenants_makes_two_stacks() {
    let api = ApiHarness::with_tenants(&[], &[]).await;
    let send = |key: &'static TestKey| {
        let api = &api;
        async move {
            let request = http::Request::post("/stacks")
                .header("x-api-key", key.key)
                .header("idempotency-key", "order-42")
                .header("content-type", "application/json")
                .body(axum::body::Body::from(create_body().to_string()))
                .expect("request");
            let reply = api.send(request).await;
            assert_eq!(reply.status, 201, "{}", reply.json);
            reply.json["stack_id"].as_str().expect("id").to_owned()
        }
    };
    let (ctf, wargame) = (send(&CTF_PLATFORM).await, send(&WARGAME_PLATFORM).await);
    assert_ne!(ctf, wargame);
    assert_eq!(send(&CTF_PLATFORM_NEXT).await, ctf, "the same platform's retry replays");
    api.finish().await;
}

#[tokio::test]
async fn records_from_before_tenants_belong_to_default_and_a_removed_tenants_stacks_end() {
    let api = ApiHarness::with_tenants(&[("uni", 5)], &[]).await;
    // A stack of the single-key era: made with the one key, its record without a tenant.
    let legacy = create_as(
        &api,
        &TestKey {
            key: API_KEY,
            role: "owner",
            tenant: "default",
        },
    )
    .await;
    api.state
        .stacks
        .store()
        .client()
        .update_item()
        .table_name(api.table.name())
        .key("pk", AttributeValue::S("STACK".into()))
        .key("sk", AttributeValue::S(legacy.clone()))
        .update_expression("REMOVE tenant")
        .send()
        .await
        .expect("remove the tenant attribute");
    let own = api.call(Method::GET, &format!("/stacks/{legacy}"), None).await;
    assert_eq!(own.status, 200, "{}", own.json);
    let foreign = ask(&api, &CTF_PLATFORM, &Method::GET, "/stacks/{id}", &legacy).await;
    assert_eq!(foreign.status, 404);

    let (uni, ctf) = (
        create_as(&api, &UNI_PLATFORM).await,
        create_as(&api, &CTF_PLATFORM).await,
    );
    // The operators remove tenant uni: the next pass ends its stacks, and only those.
    let without_uni = tenants::settings(&[]);
    let tenants_left = without_uni[0].1.replace("uni,", "");
    let keys_left = tenants::api_keys(&[CTF_PLATFORM, WARGAME_PLATFORM]);
    let reconciler = TestReconciler::over(&api, &[("STACK_TENANTS", &tenants_left), ("API_KEYS", &keys_left)]).await;
    let summary = reconciler.pass().await;
    assert_eq!(summary.counts.failures, 0, "{summary:?}");
    let records: HashSet<String> = api.record_ids().await;
    assert!(!records.contains(&uni), "the removed tenant's stack ended");
    assert!(records.contains(&ctf) && records.contains(&legacy), "{records:?}");
    api.finish().await;
}

/// What one random call aimed at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// A stack of a tenant the key sees.
    Own,
    /// A stack of a tenant the key does not see.
    Foreign,
    Gone,
    Malformed,
}

/// 10,000 calls spread over tenants, roles, routes and stack ids (own, foreign, gone,
/// malformed), 16 at a time, from a fixed seed (`TENANCY_SEED` to vary it): no answer is 5xx,
/// none reveals or changes another tenant's stack. Afterwards every stack that is gone, or
/// whose expiry moved, was deleted or renewed by a key allowed to.
#[tokio::test]
async fn ten_thousand_random_calls_never_reveal_or_change_another_tenants_stack() {
    use rand::rngs::StdRng;
    use rand::seq::IndexedRandom;
    use rand::{Rng, SeedableRng};
    use std::collections::HashMap;

    let seed = std::env::var("TENANCY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(29);
    let mut rng = StdRng::seed_from_u64(seed);
    let api = ApiHarness::with_tenants(&[], &[("STACK_CREATE_CONCURRENCY", "32")]).await;
    let platforms = [CTF_PLATFORM, WARGAME_PLATFORM, UNI_PLATFORM];
    let mut owner: HashMap<String, &'static str> = HashMap::new();
    for key in &platforms {
        for _ in 0..6 {
            owner.insert(create_as(&api, key).await, key.tenant);
        }
    }
    let mut gone = Vec::new();
    for key in &platforms {
        let id = create_as(&api, key).await;
        assert_eq!(ask(&api, key, &Method::DELETE, "/stacks/{id}", &id).await.status, 200);
        gone.push(id);
    }
    let expiry_before = expiries(&api).await;
    let malformed = [
        "stack-xyz",
        "stack-0123456789ABCDEF",
        "..%2f..%2fstats",
        "job-0123456789abcdef",
        "stack-0123456789abcdef0",
    ];
    let bogus = TestKey {
        key: "a-key-nobody-configured",
        role: "platform",
        tenant: "ctf",
    };
    let ids: Vec<String> = owner.keys().cloned().collect();
    let mut changed_by_right: HashSet<String> = HashSet::new();
    let mut jobs = Vec::new();
    let mut statuses: std::collections::BTreeMap<u16, usize> = Default::default();
    let (mut calls, mut foreign_calls) = (0, 0);
    while calls < 10_000 {
        let mut batch = Vec::new();
        for _ in 0..16 {
            let key = if rng.random_ratio(1, 20) {
                bogus
            } else {
                *KEYS.choose(&mut rng).expect("keys")
            };
            let target = match rng.random_range(0..10) {
                0..=3 => Target::Own,
                4..=7 => Target::Foreign,
                8 => Target::Gone,
                _ => Target::Malformed,
            };
            let candidates: Vec<&String> = ids
                .iter()
                .filter(|id| key.sees(owner[*id]) == (target == Target::Own))
                .collect();
            let id = match target {
                Target::Own | Target::Foreign => match candidates.choose(&mut rng) {
                    Some(id) => (*id).clone(),
                    None => continue,
                },
                Target::Gone => gone.choose(&mut rng).expect("gone").clone(),
                Target::Malformed => (*malformed.choose(&mut rng).expect("malformed")).to_owned(),
            };
            let (method, path, body) = match rng.random_range(0..100) {
                0..=29 => (Method::GET, format!("/stacks/{id}/status"), None),
                30..=49 => (Method::GET, format!("/stacks/{id}"), None),
                50..=64 => (Method::POST, format!("/stacks/{id}/renew"), None),
                // Deleting one's own stacks would soon leave nothing to aim at.
                65..=72 if target == Target::Own => (Method::GET, format!("/stacks/{id}/status"), None),
                65..=72 => (Method::DELETE, format!("/stacks/{id}"), None),
                73..=76 => {
                    let mut mixed: Vec<String> = ids.choose_multiple(&mut rng, 3).cloned().collect();
                    mixed.push(id.clone());
                    mixed.retain(|s| owner.get(s).is_none_or(|tenant| !key.sees(tenant)));
                    if mixed.is_empty() {
                        mixed.push(id.clone());
                    }
                    let body = json!({ "stack_ids": mixed });
                    (Method::POST, "/stacks/batch-delete".to_owned(), Some(body))
                }
                77..=81 => (Method::GET, "/stacks?limit=1000".to_owned(), None),
                82..=88 => (Method::GET, "/stats".to_owned(), None),
                89..=93 => (Method::GET, "/history".to_owned(), None),
                94..=98 => (Method::GET, "/identity".to_owned(), None),
                _ => (Method::POST, "/stacks".to_owned(), Some(create_body())),
            };
            if target == Target::Foreign {
                foreign_calls += 1;
            }
            batch.push((key, target, id, method, path, body));
        }
        let replies = futures::future::join_all(
            batch
                .iter()
                .map(|(key, _, _, method, path, body)| api.call_as(key.key, method.clone(), path, body.clone())),
        )
        .await;
        for ((key, target, id, method, path, body), reply) in batch.iter().zip(replies) {
            calls += 1;
            *statuses.entry(reply.status).or_default() += 1;
            let what = format!(
                "{} {method} {path} ({target:?}): {} {}",
                key.key, reply.status, reply.json
            );
            assert!(reply.status < 500, "{what}");
            let text = reply.json.to_string();
            // No answer names a stack of a tenant the key does not see.
            for (other, tenant) in &owner {
                assert!(
                    key.sees(tenant) && *key != bogus || !text.contains(other.as_str()),
                    "{what}"
                );
            }
            if *target == Target::Foreign && path.contains(id.as_str()) {
                assert!(matches!(reply.status, 401 | 403 | 404), "{what}");
            }
            if path == "/stacks" && reply.status == 201 {
                let created = reply.json["stack_id"].as_str().expect("id").to_owned();
                owner.insert(created, key.tenant);
            }
            if reply.status == 202 {
                jobs.push((reply.json["job_id"].as_str().expect("job id").to_owned(), *key));
            }
            let may_touch = match (method, path.as_str()) {
                (&Method::POST, p) if p.ends_with("/renew") => key.may_change(),
                (&Method::DELETE, _) => key.may_change(),
                (&Method::POST, "/stacks/batch-delete") => key.may_batch_delete(),
                _ => false,
            };
            if may_touch && *key != bogus {
                let named: Vec<String> = match body.as_ref().and_then(|b| b["stack_ids"].as_array()) {
                    Some(ids) => ids.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect(),
                    None => vec![id.clone()],
                };
                changed_by_right.extend(named.into_iter().filter(|s| owner.get(s).is_some_and(|t| key.sees(t))));
            }
        }
    }
    for (job, key) in &jobs {
        wait_job(&api, key, &format!("/stacks/batch-delete/{job}")).await;
    }
    let after = expiries(&api).await;
    for (id, expiry) in &expiry_before {
        if gone.contains(id) {
            continue;
        }
        let touched = after.get(id) != Some(expiry);
        assert!(
            !touched || changed_by_right.contains(id),
            "{id} changed by a key that may not"
        );
    }
    eprintln!("{calls} calls ({foreign_calls} at another tenant's stacks), seed {seed}: {statuses:?}");
    api.finish().await;
}
