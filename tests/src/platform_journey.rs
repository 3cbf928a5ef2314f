//! One participant's journey as the benchmarks drive it: a platform client creates a stack,
//! polls its status until `running`, and the participant connects to `node_public_ip:port`
//! until it reads the challenge's flag, every refusal after `running` counted.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http::Method;
use serde_json::{Value, json};

use crate::api_process::ApiClient;
use crate::challenges::Challenge;
use crate::participant::{address_of, read_all};

/// The participant's next try after a refusal.
const RETRY_CONNECT: Duration = Duration::from_millis(50);

/// What one participant saw, from the create request.
#[derive(Debug, Default)]
pub struct Journey {
    /// The caller's index of the challenge (0 when there is one).
    pub challenge: usize,
    pub stack_id: Option<String>,
    pub node_ip: Option<String>,
    pub running: Option<Duration>,
    pub connected: Option<Duration>,
    /// Connections refused after the status said `running`.
    pub refused_after_running: usize,
    /// What the first of them met (refused, timed out, answered without the flag).
    pub first_refusal: Option<String>,
    pub failed: Option<String>,
    pub creating_past_deadline: bool,
}

/// A participant of each of `challenges`, all starting at the same instant (each journey's
/// `challenge` left 0); given up `deadline` after the start.
pub async fn start_together(
    client: &ApiClient,
    challenges: &[Challenge],
    poll: Duration,
    deadline: Duration,
) -> Vec<Journey> {
    let start = Instant::now();
    let participants = challenges.iter().map(|challenge| {
        let target = json!([{ "container_port": challenge.port, "protocol": "TCP" }]);
        let body = json!({ "pod_spec": challenge.manifest(), "target_port": target });
        async move { journey(client, &body, &challenge.flag, poll, start, deadline).await }
    });
    futures::future::join_all(participants).await
}

/// The platform deletes the stacks of `journeys`, all at once.
pub async fn delete_stacks(client: &ApiClient, journeys: &[Journey]) {
    let deletes = journeys
        .iter()
        .filter_map(|j| j.stack_id.as_deref())
        .map(|id| async move { client.call(Method::DELETE, &format!("/stacks/{id}"), None, None).await });
    futures::future::join_all(deletes).await;
}

/// One platform client and its participant: create, poll status as a platform does until
/// `running` (every `poll`; given up `deadline` after `start`), then connect until the flag is read.
pub async fn journey(
    client: &ApiClient,
    body: &Value,
    flag: &str,
    poll: Duration,
    start: Instant,
    deadline: Duration,
) -> Journey {
    let mut outcome = Journey::default();
    let created = client.call(Method::POST, "/stacks", Some(body), None).await;
    if created.status != Some(201) {
        outcome.failed = Some(format!("create answered {}: {}", created.class(), created.json));
        return outcome;
    }
    let Some(id) = created.json["stack_id"].as_str().map(str::to_owned) else {
        outcome.failed = Some(format!("no stack_id in {}", created.json));
        return outcome;
    };
    outcome.stack_id = Some(id.clone());
    let mut stack = created.json;
    loop {
        match stack["status"].as_str() {
            Some("running") => break,
            Some("creating") => {}
            other => {
                outcome.failed = Some(format!("{other:?}: {} {}", stack["reason"], stack["message"]));
                return outcome;
            }
        }
        if start.elapsed() > deadline {
            outcome.creating_past_deadline = true;
            return outcome;
        }
        tokio::time::sleep(poll).await;
        let status = client
            .call(Method::GET, &format!("/stacks/{id}/status"), None, None)
            .await;
        match status.status {
            Some(200) => stack = status.json,
            // Removed under the participant (unschedulable past STACK_SCHEDULING_TIMEOUT).
            Some(404) => {
                outcome.failed = Some(format!("gone (404) while creating: {}", status.json));
                return outcome;
            }
            _ => {}
        }
    }
    outcome.running = Some(start.elapsed());
    outcome.node_ip = stack["node_public_ip"].as_str().map(str::to_owned);
    let Some(address) = address_of(&stack) else {
        outcome.failed = Some(format!("running without an address: {stack}"));
        return outcome;
    };
    outcome.connected = connect(address, flag, &mut outcome, start, deadline).await;
    outcome
}

/// The first connection that reads the flag, retried every 50 ms (each refusal counted).
async fn connect(
    address: SocketAddr,
    flag: &str,
    outcome: &mut Journey,
    start: Instant,
    deadline: Duration,
) -> Option<Duration> {
    while start.elapsed() < deadline * 2 {
        let met = match read_all(address).await {
            Ok(said) if said.contains(flag) => return Some(start.elapsed()),
            Ok(said) => format!(
                "answered without the flag: {:?}",
                said.chars().take(60).collect::<String>()
            ),
            Err(e) => e.to_string(),
        };
        outcome.refused_after_running += 1;
        outcome
            .first_refusal
            .get_or_insert_with(|| format!("{met} at {:.2} s", start.elapsed().as_secs_f64()));
        tokio::time::sleep(RETRY_CONNECT).await;
    }
    None
}
