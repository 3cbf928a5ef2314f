//! The dashboard in a real headless Chromium (Debian's chromium + chromedriver, over
//! WebDriver) against the API served over TCP on the local environment. Screenshots go to
//! target/tmp/dashboard/.

use std::collections::BTreeSet;
use std::time::Duration;

use fantoccini::Locator;
use http::Method;
use serde_json::json;
use stack_tests::api::{API_KEY, ApiHarness, WEB_POD};
use stack_tests::browser::{Browser, plain, serve};

/// Long enough for a refresh (every 4 s) and a delete; the wait ends as soon as it holds.
const PAGE_WAIT: Duration = Duration::from_secs(20);

async fn text(browser: &Browser, css: &str) -> String {
    browser
        .client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .text()
        .await
        .expect("text")
}

async fn enter_key(browser: &Browser, key: &str) {
    let input = browser.client.find(Locator::Id("key")).await.expect("key input");
    input.send_keys(key).await.expect("type key");
    browser
        .client
        .find(Locator::Id("key-submit"))
        .await
        .expect("key button")
        .click()
        .await
        .expect("submit key");
}

/// Waits until the page has shown data loaded after `after` (ms since the epoch, as the page
/// writes into `body[data-loaded]`).
async fn wait_loaded_after(browser: &Browser, after: u64) {
    let client = &browser.client;
    client
        .wait()
        .at_most(PAGE_WAIT)
        .for_element(Locator::XPath(&format!("//body[@data-loaded > {after}]")))
        .await
        .expect("the page loaded the data");
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

#[tokio::test]
async fn dashboard_shows_what_the_api_shows_and_deletes_a_stack() {
    let api = ApiHarness::start().await;
    let mut created = BTreeSet::new();
    for _ in 0..3 {
        let reply = api.create(WEB_POD, json!(80)).await;
        assert_eq!(reply.status, 201, "{}", reply.json);
        created.insert(plain(&reply.json["stack_id"]));
    }
    let base = serve(api.router.clone()).await.expect("serve the API");
    let browser = Browser::start(1366, 1000).await.expect("browser");

    browser
        .client
        .goto(&format!("{base}/dashboard"))
        .await
        .expect("open dashboard");
    browser
        .client
        .wait()
        .at_most(PAGE_WAIT)
        .for_element(Locator::Id("key-form"))
        .await
        .expect("key form");
    let before_key = browser.console().await.expect("console");
    assert!(
        before_key.iter().all(|e| !e.is_error()),
        "console errors on load: {before_key:?}"
    );

    let t0 = page_now(&browser).await;
    enter_key(&browser, API_KEY).await;
    wait_loaded_after(&browser, t0).await;
    let shot = browser.screenshot("dashboard-laptop").await.expect("screenshot");
    eprintln!("screenshot: {}", shot.display());

    // Same counts as /stats, same stacks as /stacks.
    let stats = api.call(Method::GET, "/stats", None).await.json;
    assert_eq!(text(&browser, "#stat-total").await, plain(&stats["total_stacks"]));
    assert_eq!(text(&browser, "#stat-active").await, plain(&stats["active_stacks"]));
    assert_eq!(text(&browser, "#stat-ports").await, plain(&stats["used_node_ports"]));
    assert_eq!(stats["isolation"]["in_place"], true, "{}", stats["isolation"]);
    assert_eq!(text(&browser, "#stat-isolation").await, "in place");
    let listed: BTreeSet<String> = api.call(Method::GET, "/stacks", None).await.json["stacks"]
        .as_array()
        .expect("stacks")
        .iter()
        .map(|s| plain(&s["stack_id"]))
        .collect();
    assert_eq!(listed, created);
    let mut shown = BTreeSet::new();
    for row in browser.client.find_all(Locator::Css("#rows .row")).await.expect("rows") {
        shown.insert(row.attr("data-stack-id").await.expect("attr").expect("row id"));
    }
    assert_eq!(shown, listed, "the table shows the API's stacks");
    // Grouped by the challenge label of the manifest.
    assert!(text(&browser, "#groups").await.contains("web"), "challenge group shown");

    // Delete one through the page, with its confirmation.
    let victim = created.iter().next().expect("a stack").clone();
    browser
        .client
        .find(Locator::Css(&format!("button.delete[data-stack-id='{victim}']")))
        .await
        .expect("delete button")
        .click()
        .await
        .expect("click delete");
    browser
        .client
        .wait()
        .at_most(PAGE_WAIT)
        .for_element(Locator::Css("#confirm[open]"))
        .await
        .expect("confirmation asked");
    browser.screenshot("dashboard-confirm").await.expect("screenshot");
    browser
        .client
        .find(Locator::Id("confirm-ok"))
        .await
        .expect("confirm button")
        .click()
        .await
        .expect("confirm");
    browser
        .client
        .wait()
        .at_most(PAGE_WAIT)
        .for_element(Locator::XPath(&format!(
            "//p[@id='message' and contains(., 'Deleted {victim}')]"
        )))
        .await
        .expect("the page says it deleted the stack");
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
    let t1 = page_now(&browser).await;
    wait_loaded_after(&browser, t1).await;
    assert_eq!(text(&browser, "#stat-total").await, "2");
    assert_eq!(
        browser
            .client
            .find_all(Locator::Css("#rows .row"))
            .await
            .expect("rows")
            .len(),
        2
    );

    // Batch-delete the whole challenge group: confirmation, then the job's progress to the end.
    browser
        .client
        .find(Locator::Css("#groups button.group-delete"))
        .await
        .expect("group delete button")
        .click()
        .await
        .expect("click group delete");
    browser
        .client
        .wait()
        .at_most(PAGE_WAIT)
        .for_element(Locator::Css("#confirm[open]"))
        .await
        .expect("confirmation asked");
    browser
        .client
        .find(Locator::Id("confirm-ok"))
        .await
        .expect("confirm button")
        .click()
        .await
        .expect("confirm");
    browser
        .client
        .wait()
        .at_most(PAGE_WAIT)
        .for_element(Locator::XPath(
            "//span[@id='job-text' and contains(., 'completed: 2/2')]",
        ))
        .await
        .expect("the batch job completes");
    assert!(api.managed_services().await.is_empty(), "services left after the batch");
    assert!(api.records().await.is_empty(), "records left after the batch");

    // A phone-sized window still shows the page.
    browser.client.set_window_size(390, 844).await.expect("resize");
    browser.screenshot("dashboard-phone").await.expect("screenshot");

    let after = browser.console().await.expect("console");
    assert!(after.iter().all(|e| !e.is_error()), "console errors: {after:?}");
    browser.close().await;
    api.finish().await;
}

#[tokio::test]
async fn a_wrong_key_is_refused_with_a_clear_message() {
    let api = ApiHarness::start().await;
    let base = serve(api.router.clone()).await.expect("serve the API");
    let browser = Browser::start(1366, 800).await.expect("browser");
    browser
        .client
        .goto(&format!("{base}/dashboard"))
        .await
        .expect("open dashboard");
    browser
        .client
        .wait()
        .at_most(PAGE_WAIT)
        .for_element(Locator::Id("key-form"))
        .await
        .expect("key form");
    enter_key(&browser, "not-the-key").await;
    browser
        .client
        .wait()
        .at_most(PAGE_WAIT)
        .for_element(Locator::Css("#message.error"))
        .await
        .expect("an error message");
    let message = text(&browser, "#message").await;
    assert!(message.contains("API key was refused"), "{message}");
    assert!(
        !browser
            .client
            .find(Locator::Id("main"))
            .await
            .expect("main")
            .is_displayed()
            .await
            .expect("displayed"),
        "no data shown without the right key"
    );
    browser.screenshot("dashboard-wrong-key").await.expect("screenshot");
    browser.close().await;
    api.finish().await;
}
