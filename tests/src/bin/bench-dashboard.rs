//! How fast the dashboard loads with many stacks, in a real headless Chromium (run
//! `tests/env/up` first; Chromium and chromedriver as for the browser test).
//!
//! Seeds N healthy stacks straight into DynamoDB and the apiserver, as `bench-reconciler`
//! does (records with their hardened manifests, pods bound to simulated nodes, headless
//! services), serves the API router on loopback, opens `/dashboard`, enters the key and
//! prints: the time from the key's submit until the first page of the table and the summary
//! are shown (the page's own measure of its refresh: /stats, /history, one /stacks page,
//! render), the calls that took, a later refresh, a turn to the next page, the rows in the
//! DOM and the time to render after a scroll to the page's end; then `--loads` more full
//! page loads (the key kept by the tab) and their median. Before the browser, where the
//! server's time goes: each read behind `/stats` and behind one `/stacks` page timed alone,
//! `--rounds` times (median; 0 skips it). Everything it made (table, namespace, nodes) is
//! deleted at the end.
//!
//! `cargo run --release -p stack-tests --bin bench-dashboard -- --stacks 10000 --loads 5`

use std::process::ExitCode;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;

use fantoccini::Locator;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use stack_api::AppState;
use stack_core::{
    MANAGED_BY_LABEL, MANAGED_BY_VALUE, Manifest, STACK_ID_LABEL, Scope, StackId, StackUsage, Stacks, Store,
};
use stack_tests::api::{API_KEY, kube_config};
use stack_tests::bench_fixture::{BenchArgs, BenchError, BenchFixture, PODS_TIMEOUT, wait_all_running};
use stack_tests::browser::{Browser, serve};
use stack_tests::env::{TestEnv, unique_name};
use stack_tests::reconciler::reconciler_config;
use stack_tests::seeding::{Seed, Seeder, add_seed_nodes};

const PAGE_TIMEOUT: Duration = Duration::from_secs(120);
/// The dashboard's page size (app.js `PAGE_LIMIT`).
const PAGE_LIMIT: usize = 100;

#[tokio::main]
async fn main() -> ExitCode {
    let env = TestEnv::connect().await.expect("local environment (tests/env/up)");
    let args = BenchArgs::from_env();
    let (stacks, loads, rounds) = (
        args.number("--stacks", 10_000),
        args.number("--loads", 5),
        args.number("--rounds", 5),
    );
    let mut fixture = BenchFixture::default();
    let result = run(&env, stacks, loads, rounds, &mut fixture).await;
    for failure in fixture.remove(&env).await {
        eprintln!("bench-dashboard: cleanup: {failure}");
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("bench-dashboard: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run(
    env: &TestEnv,
    stacks: usize,
    loads: usize,
    rounds: usize,
    fixture: &mut BenchFixture,
) -> Result<(), BenchError> {
    let table_name = fixture.fresh_table(env, "dash").await?;
    let namespace_name = fixture.fresh_namespace(env, "dash").await?;
    let role = unique_name("dash");
    let targets = add_seed_nodes(env, fixture, &role, stacks).await?;
    let config = reconciler_config(
        &namespace_name,
        &table_name,
        &[("STACK_NODE_ROLE", &role), ("API_KEY", API_KEY)],
    );
    let seeder = Seeder::new(env, &config, targets);
    let started = Instant::now();
    seeder.seed_all(&vec![Seed::Healthy; stacks]).await?;
    println!("seeded {stacks} stacks in {:.1}s", started.elapsed().as_secs_f64());
    wait_all_running(seeder.pods(), stacks, PODS_TIMEOUT).await?;
    let kube = kube::Client::try_from(kube_config(env).await)?;
    let state = AppState::with_clients(config, Store::new(env.dynamodb.clone(), &table_name, true), kube);
    if rounds > 0 {
        breakdown(env, &state, rounds).await?;
    }
    let base = serve(stack_api::router(state)).await?;
    let browser = Browser::start(1366, 900).await?;
    let client = &browser.client;
    let shown = open_dashboard(client, &base, Locator::Id("key-form")).await?;
    println!("page shown (no key yet): {} ms", shown.as_millis());
    client.find(Locator::Id("key")).await?.send_keys(API_KEY).await?;
    let submitted = Instant::now();
    client.find(Locator::Id("key-submit")).await?.click().await?;
    wait_for(client, Locator::Css("body[data-loaded]")).await?;
    let first = submitted.elapsed();
    let page_ms = client.execute("return document.body.dataset.loadMs", vec![]).await?;
    let rows = client.find_all(Locator::Css("#rows .row")).await?.len();
    let shown = client.find(Locator::Id("stat-total")).await?.text().await?;
    println!(
        "first load with {stacks} stacks: {} ms from the key's submit to the table ({} ms measured by the page); /stats says {shown}; {rows} rows in the DOM",
        first.as_millis(),
        page_ms.as_str().unwrap_or("?")
    );
    // Where the time goes: each data call as the browser saw it (Resource Timing).
    let calls = client
        .execute(
            "return performance.getEntriesByType('resource')\
               .filter(e => e.initiatorType === 'fetch')\
               .map(e => [new URL(e.name).pathname, Math.round(e.responseStart - e.requestStart), \
                          Math.round(e.responseEnd - e.responseStart), e.encodedBodySize]);",
            vec![],
        )
        .await?;
    let calls = calls.as_array().cloned().unwrap_or_default();
    let page_calls = calls
        .iter()
        .filter(|c| c[0].as_str().is_some_and(|p| p.ends_with("/stacks")))
        .count();
    println!("  {} data calls, {page_calls} of them /stacks pages", calls.len());
    for call in calls.iter().take(6) {
        println!(
            "  {}: server {} ms, transfer {} ms, {} bytes",
            call[0].as_str().unwrap_or("?"),
            call[1],
            call[2],
            call[3]
        );
    }
    // The next refresh (every 4 s): what an open page pays to stay current.
    let loaded = loaded_at(client).await?;
    wait_loaded_after(client, &loaded).await?;
    let again = client.execute("return document.body.dataset.loadMs", vec![]).await?;
    println!(
        "a later refresh: {} ms measured by the page",
        again.as_str().unwrap_or("?")
    );
    let loaded = loaded_at(client).await?;
    let turned = Instant::now();
    client.find(Locator::Id("page-next")).await?.click().await?;
    wait_loaded_after(client, &loaded).await?;
    let pager = client.find(Locator::Id("page-info")).await?.text().await?;
    println!(
        "next page: {} ms from the click ({} ms measured by the page): {pager}",
        turned.elapsed().as_millis(),
        client
            .execute("return document.body.dataset.loadMs", vec![])
            .await?
            .as_str()
            .unwrap_or("?")
    );
    let scroll = client
        .execute(
            "const v = document.getElementById('viewport'); const t = performance.now(); \
             v.scrollTop = v.scrollHeight; v.dispatchEvent(new Event('scroll')); \
             return new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => \
               r([performance.now() - t, document.querySelector('#rows .row:last-child').dataset.stackId]))));",
            vec![],
        )
        .await?;
    println!(
        "scroll to the last row rendered in {:.1} ms",
        scroll[0].as_f64().unwrap_or(f64::NAN)
    );
    let shot = browser.screenshot(&format!("bench-{stacks}")).await?;
    println!("screenshot: {}", shot.display());

    // Whole loads of the page, the key already in the tab's session: navigation to table.
    let mut samples = Vec::new();
    for _ in 0..loads {
        samples.push(open_dashboard(client, &base, Locator::Css("body[data-loaded]")).await?);
    }
    if !samples.is_empty() {
        let ms: Vec<u128> = samples.iter().map(Duration::as_millis).collect();
        samples.sort();
        println!(
            "{loads} page loads (navigation to table and summary): {ms:?} ms, median {} ms",
            samples[samples.len() / 2].as_millis()
        );
    }
    browser.close().await;
    Ok(())
}

/// Where the server's time goes: each read behind `/stats` and behind a `/stacks` page, alone,
/// `rounds` times; prints the median of each (ms).
async fn breakdown(env: &TestEnv, state: &AppState, rounds: usize) -> Result<(), BenchError> {
    let stacks: &Stacks = &state.stacks;
    let router = stack_api::router(state.clone());
    let store = stacks.store();
    let cluster = stacks.cluster();
    let (keys, _) = store.list_stack_keys(None, PAGE_LIMIT).await?;
    let ids: Vec<StackId> = keys.iter().map(|k| k.stack_id().clone()).collect();
    let pods: Api<Pod> = Api::namespaced(env.kube.clone(), &stacks.config().validation.namespace);
    let selector = format!(
        "{MANAGED_BY_LABEL}={MANAGED_BY_VALUE},{STACK_ID_LABEL} in ({})",
        ids.iter().map(StackId::as_str).collect::<Vec<_>>().join(",")
    );
    println!("where the time goes ({rounds} rounds, median):");
    println!("  /stats:");
    timed(
        rounds,
        "records, one query (what /stats read before; the reconciler's)",
        || async { Ok(store.list_stacks(Manifest::Omit).await?.records.len()) },
    )
    .await?;
    timed(rounds, "records, one query with a ProjectionExpression", || async {
        one_query(store, None).await
    })
    .await?;
    timed(rounds, "usage index, one query", || async {
        one_query(store, Some("usage")).await
    })
    .await?;
    timed(rounds, "usage index, 16 ranges at once (what /stats reads)", || async {
        Ok(store.list_stack_usage().await?.len())
    })
    .await?;
    timed(rounds, "node list", || async { Ok(cluster.list_nodes().await?.len()) }).await?;
    timed(rounds, "Stacks::stats", || async {
        Ok(stacks.stats(&Scope::All).await?.total_stacks)
    })
    .await?;
    timed(rounds, "GET /stats through the router (bytes)", || async {
        answer_bytes(&router, "/stats").await
    })
    .await?;
    println!("  one /stacks page of {PAGE_LIMIT}:");
    timed(rounds, "key listing (created_at index)", || async {
        Ok(store.list_stack_keys(None, PAGE_LIMIT).await?.0.len())
    })
    .await?;
    timed(rounds, "records + manifests (BatchGetItem, 25 at a time)", || async {
        let mut n = 0;
        for chunk in ids.chunks(25) {
            n += store.get_stacks(chunk).await?.len();
        }
        Ok(n)
    })
    .await?;
    timed(rounds, "their pods (label-selected, what a page reads)", || async {
        Ok(cluster.list_pods_of(&ids).await?.len())
    })
    .await?;
    timed(rounds, "their pods, one list without limit", || async {
        Ok(pods.list(&ListParams::default().labels(&selector)).await?.items.len())
    })
    .await?;
    timed(rounds, "their pods, possibly stale (resourceVersion=0)", || async {
        let params = ListParams::default().labels(&selector).match_any();
        Ok(pods.list(&params).await?.items.len())
    })
    .await?;
    timed(rounds, "their services", || async {
        Ok(cluster.list_services_of(&ids).await?.len())
    })
    .await?;
    timed(rounds, "Stacks::list_page", || async {
        Ok(stacks
            .list_page(&Scope::All, None, PAGE_LIMIT, usize::MAX, |_| 0)
            .await?
            .stacks
            .len())
    })
    .await?;
    timed(rounds, "GET /stacks?limit=100 through the router (bytes)", || async {
        answer_bytes(&router, &format!("/stacks?limit={PAGE_LIMIT}")).await
    })
    .await?;
    Ok(())
}

/// Runs `read` `rounds` times and prints its median time and what it counted.
async fn timed<F, Fut>(rounds: usize, what: &str, read: F) -> Result<(), BenchError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<usize, BenchError>>,
{
    let mut samples = Vec::with_capacity(rounds);
    let mut counted = 0;
    for _ in 0..rounds.max(1) {
        let started = Instant::now();
        counted = read().await?;
        samples.push(started.elapsed());
    }
    samples.sort();
    println!(
        "    {what}: {} ms ({counted} items)",
        samples[samples.len() / 2].as_millis()
    );
    Ok(())
}

/// The size of the router's answer to `GET path` (with the key), which must be a 200.
async fn answer_bytes(router: &axum::Router, path: &str) -> Result<usize, BenchError> {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let request = http::Request::get(path)
        .header("X-API-KEY", API_KEY)
        .body(axum::body::Body::empty())
        .map_err(query_error)?;
    let Ok(response) = router.clone().oneshot(request).await;
    let status = response.status();
    let body = response.into_body().collect().await.map_err(query_error)?.to_bytes();
    if status != http::StatusCode::OK {
        return Err(BenchError::Query(format!("GET {path}: {status}")));
    }
    Ok(body.len())
}

/// One query (page after page) of the stacks' partition, of the table with a
/// ProjectionExpression of what `/stats` counts (DynamoDB still reads, and pages by, whole
/// records) or of `index`; the items read as [`StackUsage`].
async fn one_query(store: &Store, index: Option<&str>) -> Result<usize, BenchError> {
    let mut start = None;
    let mut n = 0;
    loop {
        let query = store
            .client()
            .query()
            .table_name(store.table())
            .set_index_name(index.map(str::to_owned))
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", AttributeValue::S("STACK".into()))
            .set_exclusive_start_key(start);
        let query = match index {
            Some(_) => query,
            None => query
                .consistent_read(true)
                .projection_expression("#s, node_id, ports, requested_cpu_milli, requested_memory_bytes")
                .expression_attribute_names("#s", "status"),
        };
        let out = query.send().await.map_err(query_error)?;
        for item in out.items.unwrap_or_default() {
            let _: StackUsage = serde_dynamo::from_item(item).map_err(query_error)?;
            n += 1;
        }
        start = out.last_evaluated_key;
        if start.is_none() {
            return Ok(n);
        }
    }
}

fn query_error(error: impl std::fmt::Display) -> BenchError {
    BenchError::Query(error.to_string())
}

async fn loaded_at(client: &fantoccini::Client) -> Result<String, BenchError> {
    Ok(client
        .execute("return document.body.dataset.loaded", vec![])
        .await?
        .as_str()
        .unwrap_or_default()
        .to_owned())
}

async fn wait_loaded_after(client: &fantoccini::Client, loaded: &str) -> Result<(), BenchError> {
    wait_for(client, Locator::XPath(&format!("//body[@data-loaded != '{loaded}']"))).await
}

/// Opens the dashboard and waits until `shown` is on the page; how long that took.
async fn open_dashboard(client: &fantoccini::Client, base: &str, shown: Locator<'_>) -> Result<Duration, BenchError> {
    let opened = Instant::now();
    client.goto(&format!("{base}/dashboard")).await?;
    wait_for(client, shown).await?;
    Ok(opened.elapsed())
}

/// Waits, at most [`PAGE_TIMEOUT`], until `element` is on the page.
async fn wait_for(client: &fantoccini::Client, element: Locator<'_>) -> Result<(), BenchError> {
    client.wait().at_most(PAGE_TIMEOUT).for_element(element).await?;
    Ok(())
}
