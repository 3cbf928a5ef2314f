//! The dashboard in a real headless Chromium (Debian's chromium + chromedriver, over
//! WebDriver) against the API served over TCP on the local environment, with the harness's
//! owner key and with keys of each role. Screenshots go to target/tmp/dashboard/.

use std::collections::BTreeSet;
use std::time::Duration;

use fantoccini::Locator;
use http::Method;
use serde_json::json;
use stack_core::KeyHash;
use stack_tests::api::{API_KEY, ApiHarness, WEB_POD};
use stack_tests::browser::{Browser, plain, serve};

/// Long enough for a refresh (every 4 s) and a delete; the wait ends as soon as it holds.
const PAGE_WAIT: Duration = Duration::from_secs(20);

/// The element `css` finds; `what` names it in a failure.
async fn find(browser: &Browser, css: &str, what: &str) -> fantoccini::elements::Element {
    browser
        .client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

async fn text(browser: &Browser, css: &str) -> String {
    find(browser, css, css).await.text().await.expect("text")
}

async fn enter_key(browser: &Browser, key: &str) {
    let input = browser.client.find(Locator::Id("key")).await.expect("key input");
    input.send_keys(key).await.expect("type key");
    click(browser, "#key-submit", "key button").await;
}

/// Waits until the page has shown data loaded after `after` (ms since the epoch, as the page
/// writes into `body[data-loaded]`).
async fn wait_loaded_after(browser: &Browser, after: u64) {
    let loaded = format!("//body[@data-loaded > {after}]");
    wait_for(browser, Locator::XPath(&loaded), "the page loaded the data").await;
}

/// Confirms the deletion the page asks about and waits until it says `id` is deleted.
async fn confirm_deletion(browser: &Browser, id: &str) {
    click(browser, "#confirm-ok", "confirm button").await;
    wait_for(
        browser,
        Locator::XPath(&format!("//p[@id='message' and contains(., 'Deleted {id}')]")),
        "the page says it deleted the stack",
    )
    .await;
}

async fn page_now(browser: &Browser) -> u64 {
    browser
        .client
        .execute("return Date.now()", vec![])
        .await
        .expect("clock")
        .as_u64()
        .expect("number")
}

/// Waits until the page's next load of the data has been shown.
async fn wait_next_load(browser: &Browser) {
    let now = page_now(browser).await;
    wait_loaded_after(browser, now).await;
}

/// Enters `key` and waits until the page has shown the data that key reads.
async fn sign_in(browser: &Browser, key: &str) {
    let now = page_now(browser).await;
    enter_key(browser, key).await;
    wait_loaded_after(browser, now).await;
}

/// Waits until the page shows what `locator` finds; `what` names it in a failure.
async fn wait_for(browser: &Browser, locator: Locator<'_>, what: &str) {
    browser
        .client
        .wait()
        .at_most(PAGE_WAIT)
        .for_element(locator)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
}

/// Clicks what `css` finds; `what` names it in a failure.
async fn click(browser: &Browser, css: &str, what: &str) {
    let element = find(browser, css, what).await;
    element.click().await.unwrap_or_else(|e| panic!("click {what}: {e}"));
}

/// Clicks `id`'s delete button and waits until the page asks to confirm.
async fn ask_deletion(browser: &Browser, id: &str) {
    click(
        browser,
        &format!("button.delete[data-stack-id='{id}']"),
        "delete button",
    )
    .await;
    wait_for(browser, Locator::Css("#confirm[open]"), "confirmation asked").await;
}

#[tokio::test]
async fn dashboard_shows_what_the_api_shows_and_deletes_a_stack() {
    let api = ApiHarness::start().await;
    let mut created = BTreeSet::new();
    for _ in 0..3 {
        created.insert(plain(&api.create_web().await.json["stack_id"]));
    }
    // An image declared ahead of an event, on every (simulated) stack node.
    let image = "registry.example.com/ctf/web:1";
    let declared = api
        .call(Method::PUT, "/prepull", Some(json!({"images": [image]})))
        .await;
    assert_eq!(declared.status, 200, "{}", declared.json);
    let started = std::time::Instant::now();
    while api.call(Method::GET, "/prepull", None).await.json["go"] != true {
        assert!(started.elapsed() < PAGE_WAIT * 4, "the pre-pull never said go");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    let browser = open_dashboard(&api).await;
    let before_key = browser.console().await.expect("console");
    assert!(
        before_key.iter().all(|e| !e.is_error()),
        "console errors on load: {before_key:?}"
    );

    sign_in(&browser, API_KEY).await;
    let shot = browser.screenshot("dashboard-laptop").await.expect("screenshot");
    eprintln!("screenshot: {}", shot.display());
    // `API_KEY` is the owner of tenant `default`.
    assert_eq!(text(&browser, "#identity").await, "owner · every tenant");

    // Same counts as /stats, same stacks as /stacks.
    let stats = api.call(Method::GET, "/stats", None).await.json;
    assert_eq!(text(&browser, "#stat-total").await, plain(&stats["total_stacks"]));
    assert_eq!(text(&browser, "#stat-active").await, plain(&stats["active_stacks"]));
    assert_eq!(text(&browser, "#stat-ports").await, plain(&stats["used_node_ports"]));
    assert_eq!(stats["isolation"]["in_place"], true, "{}", stats["isolation"]);
    assert_eq!(text(&browser, "#stat-isolation").await, "in place");
    assert_eq!(text(&browser, "#stat-images").await, "go");
    assert_eq!(
        text(&browser, "#images-summary").await,
        plain(&stats["images"]["summary"])
    );
    assert_eq!(text(&browser, "#images tbody td").await, image);
    let listed: BTreeSet<String> = api.call(Method::GET, "/stacks", None).await.json["stacks"]
        .as_array()
        .expect("stacks")
        .iter()
        .map(|s| plain(&s["stack_id"]))
        .collect();
    assert_eq!(listed, created);
    assert_eq!(shown_stacks(&browser).await, listed, "the table shows the API's stacks");
    // Grouped by the challenge label of the manifest.
    assert!(text(&browser, "#groups").await.contains("web"), "challenge group shown");

    // Delete one through the page, with its confirmation.
    let victim = created.iter().next().expect("a stack").clone();
    ask_deletion(&browser, &victim).await;
    browser.screenshot("dashboard-confirm").await.expect("screenshot");
    confirm_deletion(&browser, &victim).await;
    let pod = api.pods_api().get_opt(&victim).await.expect("get pod");
    let service = api
        .services_api()
        .get_opt(&format!("svc-{victim}"))
        .await
        .expect("get service");
    assert!(
        pod.is_none_or(|p| p.metadata.deletion_timestamp.is_some()),
        "pod still there"
    );
    assert!(service.is_none(), "service still there");
    wait_next_load(&browser).await;
    assert_eq!(text(&browser, "#stat-total").await, "2");
    assert_eq!(count(&browser, "#rows .row").await, 2);

    // Batch-delete the whole challenge group: confirmation, then the job's progress to the end.
    click(&browser, "#groups button.group-delete", "group delete button").await;
    wait_for(&browser, Locator::Css("#confirm[open]"), "confirmation asked").await;
    click(&browser, "#confirm-ok", "confirm button").await;
    wait_for(
        &browser,
        Locator::XPath("//span[@id='job-text' and contains(., 'completed: 2/2')]"),
        "the batch job completes",
    )
    .await;
    assert!(api.managed_services().await.is_empty(), "services left after the batch");
    assert!(api.records().await.is_empty(), "records left after the batch");

    // A phone-sized window still shows the page.
    browser.client.set_window_size(390, 844).await.expect("resize");
    browser.screenshot("dashboard-phone").await.expect("screenshot");

    close_without_console_error(browser, api).await;
}

#[tokio::test]
async fn a_wrong_key_is_refused_with_a_clear_message() {
    let api = ApiHarness::start().await;
    let browser = open_dashboard(&api).await;
    enter_key(&browser, "not-the-key").await;
    wait_for(&browser, Locator::Css("#message.error"), "an error message").await;
    let message = text(&browser, "#message").await;
    assert!(message.contains("API key was refused"), "{message}");
    assert!(
        !find(&browser, "#main", "main")
            .await
            .is_displayed()
            .await
            .expect("displayed"),
        "no data shown without the right key"
    );
    browser.screenshot("dashboard-wrong-key").await.expect("screenshot");
    browser.close().await;
    api.finish().await;
}

// Keys of a deployment with tenants (`API_KEYS`); `default` keeps the harness's owner key.
const CTF_PLATFORM: &str = "ctf-platform-key";
const WARGAME_PLATFORM: &str = "wargame-platform-key";
const WARGAME_VIEWER: &str = "wargame-viewer-key";
const OPERATOR_EVERY_TENANT: &str = "operator-every-tenant-key";

/// An API with tenants `ctf` and `wargame` (at most 50 stacks) besides `default`, and a key of
/// each role above.
async fn harness_with_tenants() -> ApiHarness {
    let keys = [
        ("platform:ctf", CTF_PLATFORM),
        ("platform:wargame", WARGAME_PLATFORM),
        ("viewer:wargame", WARGAME_VIEWER),
        ("operator:*", OPERATOR_EVERY_TENANT),
    ]
    .map(|(who, key)| format!("{who}:{}", KeyHash::of(key).to_hex()))
    .join(",");
    ApiHarness::with_env(&[("STACK_TENANTS", "default,ctf=500,wargame=50"), ("API_KEYS", &keys)]).await
}

/// A stack created by the platform whose key is `key`; its id.
async fn create_as(api: &ApiHarness, key: &str) -> String {
    let body = json!({ "pod_spec": WEB_POD, "target_port": 80 });
    let reply = api.call_as(key, Method::POST, "/stacks", Some(body)).await;
    assert_eq!(reply.status, 201, "{}", reply.json);
    plain(&reply.json["stack_id"])
}

/// The dashboard of `api` in a new browser, its key form ready.
async fn open_dashboard(api: &ApiHarness) -> Browser {
    let base = serve(api.router.clone()).await.expect("serve the API");
    let browser = Browser::start(1366, 1000).await.expect("browser");
    browser
        .client
        .goto(&format!("{base}/dashboard"))
        .await
        .expect("open dashboard");
    wait_for(&browser, Locator::Id("key-form"), "key form").await;
    browser
}

async fn shown_stacks(browser: &Browser) -> BTreeSet<String> {
    let mut shown = BTreeSet::new();
    for row in browser.client.find_all(Locator::Css("#rows .row")).await.expect("rows") {
        shown.insert(row.attr("data-stack-id").await.expect("attr").expect("row id"));
    }
    shown
}

async fn count(browser: &Browser, css: &str) -> usize {
    browser.client.find_all(Locator::Css(css)).await.expect(css).len()
}

/// Whether every element `css` matches (at least one) is on screen; `false` if none is.
async fn all_displayed(browser: &Browser, css: &str) -> bool {
    let found = browser.client.find_all(Locator::Css(css)).await.expect(css);
    let mut all = !found.is_empty();
    for element in found {
        all &= element.is_displayed().await.expect("displayed");
    }
    all
}

async fn none_displayed(browser: &Browser, css: &str) -> bool {
    for element in browser.client.find_all(Locator::Css(css)).await.expect(css) {
        if element.is_displayed().await.expect("displayed") {
            return false;
        }
    }
    true
}

/// How a test ends: the page logged no error (a control the role may not use would show here
/// as a failed call, 403); the browser and the harness are closed.
async fn close_without_console_error(browser: Browser, api: ApiHarness) {
    let entries = browser.console().await.expect("console");
    assert!(entries.iter().all(|e| !e.is_error()), "console errors: {entries:?}");
    browser.close().await;
    api.finish().await;
}

#[tokio::test]
async fn a_viewer_of_one_tenant_sees_its_stacks_read_only() {
    let api = harness_with_tenants().await;
    let other_tenant = create_as(&api, CTF_PLATFORM).await;
    let own = BTreeSet::from([
        create_as(&api, WARGAME_PLATFORM).await,
        create_as(&api, WARGAME_PLATFORM).await,
    ]);
    let browser = open_dashboard(&api).await;
    sign_in(&browser, WARGAME_VIEWER).await;
    browser.screenshot("dashboard-viewer").await.expect("screenshot");

    assert_eq!(text(&browser, "#identity").await, "viewer · tenant wargame");
    let shown = shown_stacks(&browser).await;
    assert_eq!(shown, own, "only the tenant's stacks");
    assert!(!shown.contains(&other_tenant));
    assert_eq!(text(&browser, "#stat-total").await, "2");
    assert_eq!(text(&browser, "#stat-tenant").await, "2 of 50 stacks (tenant limit)");

    // Read-only: no renew, delete, selection or batch delete.
    for css in [
        "button.renew",
        "button.delete",
        "button.group-delete",
        "#rows input[type=checkbox]",
    ] {
        assert_eq!(count(&browser, css).await, 0, "{css} shown to a viewer");
    }
    assert!(none_displayed(&browser, "#delete-selected, #select-all").await);
    assert!(text(&browser, "#groups").await.contains("web"), "groups still shown");

    // The history is the deployment's: the panels say so instead of empty charts.
    assert!(none_displayed(&browser, "#chart, #refusals, #passes").await);
    assert!(all_displayed(&browser, ".history-note").await, "history notes shown");
    let note = text(&browser, ".history-note").await;
    assert!(note.contains("shown to keys of every tenant only"), "{note}");
    assert!(note.contains("tenant wargame"), "{note}");
    assert_eq!(text(&browser, "#stat-refusals").await, "–");

    close_without_console_error(browser, api).await;
}

#[tokio::test]
async fn an_operator_of_every_tenant_gets_the_controls_and_deletes_a_stack() {
    let api = harness_with_tenants().await;
    let ctf = create_as(&api, CTF_PLATFORM).await;
    let wargame = create_as(&api, WARGAME_PLATFORM).await;
    let browser = open_dashboard(&api).await;
    sign_in(&browser, OPERATOR_EVERY_TENANT).await;
    browser.screenshot("dashboard-operator").await.expect("screenshot");

    assert_eq!(text(&browser, "#identity").await, "operator · every tenant");
    assert_eq!(
        shown_stacks(&browser).await,
        BTreeSet::from([ctf.clone(), wargame.clone()])
    );
    assert_eq!(count(&browser, "#rows button.renew").await, 2);
    assert_eq!(count(&browser, "#rows button.delete").await, 2);
    assert_eq!(count(&browser, "#rows input[type=checkbox]").await, 2);
    assert!(all_displayed(&browser, "#groups button.group-delete").await);
    assert!(all_displayed(&browser, "#delete-selected, #select-all").await);
    // A key of every tenant has the history and no tenant limit.
    assert!(all_displayed(&browser, "#chart, #refusals, #passes").await);
    assert!(none_displayed(&browser, ".history-note").await);
    assert_eq!(text(&browser, "#stat-tenant").await, "");

    // Delete the ctf stack through the page, with its confirmation.
    ask_deletion(&browser, &ctf).await;
    confirm_deletion(&browser, &ctf).await;
    let gone = api
        .call_as(CTF_PLATFORM, Method::GET, &format!("/stacks/{ctf}"), None)
        .await;
    assert_eq!(gone.status, 404, "{}", gone.json);
    let kept = api
        .call_as(WARGAME_PLATFORM, Method::GET, &format!("/stacks/{wargame}"), None)
        .await;
    assert_eq!(kept.status, 200, "{}", kept.json);
    wait_next_load(&browser).await;
    assert_eq!(shown_stacks(&browser).await, BTreeSet::from([wargame]));

    close_without_console_error(browser, api).await;
}

#[tokio::test]
async fn a_platform_key_is_told_it_cannot_open_the_dashboard() {
    let api = harness_with_tenants().await;
    let browser = open_dashboard(&api).await;
    enter_key(&browser, CTF_PLATFORM).await;
    wait_for(&browser, Locator::Css("#message.error"), "a message").await;
    let message = text(&browser, "#message").await;
    assert!(
        message.contains("platform key of tenant ctf cannot open the dashboard"),
        "{message}"
    );
    assert!(message.contains("operator and viewer keys"), "{message}");
    assert!(none_displayed(&browser, "#main").await, "no panel for a platform key");
    browser.screenshot("dashboard-platform").await.expect("screenshot");
    close_without_console_error(browser, api).await;
}
