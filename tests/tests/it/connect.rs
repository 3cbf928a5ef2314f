//! The moment the product exists for, on the real nodes (kubelet, containerd, runc or gVisor, CNI,
//! kube-proxy): a platform creates a stack, polls its status, and the participant connects to
//! `node_public_ip:node_port` and reads the challenge.
//!
//! Each test takes ports of its own in 32680-32767, the top of the range the admission policy
//! admits host ports in (31001-32767), as do a few tests of `isolation.rs`, `hostport.rs` and
//! `preflight.rs` (none free): kube-proxy on the real nodes forwards every NodePort
//! Service of the cluster, and the simulated nodes' stacks take theirs below
//! ([`stack_tests::api::SIMULATED_NODE_PORTS`]).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http::Method;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use stack_tests::api::{ApiHarness, Reply, WEB_POD, exposed_on};
use stack_tests::challenges::{Challenge, SCRATCH, SHELL_PORT, UDP_PORT};
use stack_tests::env::real_nodes::{GVISOR_RUNTIME_CLASS, enforcer_syncs, node_name};
use stack_tests::participant::{
    CAP_NET_RAW, UdpParticipant, address_of, has_capability, http_get, port_address, read_all, status_field,
    time_until_answered, time_until_refused, udp_exchange, udp_time_until_silent,
};
use stack_tests::reconciler::TestReconciler;

/// Longest a created stack may take to read `running` here (images are on the nodes).
const START_BOUND: Duration = Duration::from_secs(30);
/// Longest a deleted stack's port may keep answering: the kubelet kills the container, or
/// kube-proxy drops the Service's rules, within a few seconds.
const GONE_BOUND: Duration = Duration::from_secs(15);
/// Longest a stack past its ephemeral-storage limit may run: the kubelet's eviction manager
/// measures every 10 s.
const EVICTED_WITHIN: Duration = Duration::from_secs(45);

/// A harness over the real nodes whose stacks take `ports` (inclusive) of the range.
async fn on_real_nodes(exposure: &str, ports: (u16, u16), extra: &[(&str, &str)]) -> ApiHarness {
    let (min, max) = (ports.0.to_string(), ports.1.to_string());
    let mut vars = exposed_on(exposure, &min, &max).to_vec();
    vars.extend_from_slice(extra);
    ApiHarness::on_real_nodes(&vars).await
}

/// [`on_real_nodes`] with every stack under RuntimeClass `class` (`STACK_RUNTIME_CLASS`), or
/// the nodes' default, runc, when none.
async fn on_real_nodes_under(class: Option<&str>, exposure: &str, ports: (u16, u16)) -> ApiHarness {
    let extra: Vec<(&str, &str)> = class.map(|c| ("STACK_RUNTIME_CLASS", c)).into_iter().collect();
    on_real_nodes(exposure, ports, &extra).await
}

/// Polls the status route as a platform does (every 200 ms) until the stack is no longer
/// `creating`: the last answer, and every status it read on the way.
async fn poll_status(api: &ApiHarness, id: &str, bound: Duration) -> (Reply, Vec<String>) {
    poll_status_past(api, id, "creating", bound).await
}

/// [`poll_status`] until the stack is no longer `from`.
async fn poll_status_past(api: &ApiHarness, id: &str, from: &str, bound: Duration) -> (Reply, Vec<String>) {
    let started = Instant::now();
    let mut seen = Vec::new();
    loop {
        let reply = api.call(Method::GET, &format!("/stacks/{id}/status"), None).await;
        assert_eq!(reply.status, 200, "{}", reply.json);
        let status = reply.json["status"].as_str().unwrap_or_default().to_owned();
        seen.push(status.clone());
        if status != from {
            return (reply, seen);
        }
        assert!(
            started.elapsed() < bound,
            "{id} still {from} after {bound:?}: {}",
            reply.json
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Creates `challenge` with `target_port` (either client generation's shape) and polls until
/// it runs: the stack's address.
async fn create_running(api: &ApiHarness, challenge: &Challenge, target_port: Value) -> (String, SocketAddr) {
    let (id, status) = create_running_status(api, challenge, target_port).await;
    let address = address_of(&status).unwrap_or_else(|| panic!("no address in {status}"));
    (id, address)
}

/// [`create_running`]'s stack id and `running` status.
async fn create_running_status(api: &ApiHarness, challenge: &Challenge, target_port: Value) -> (String, Value) {
    let created = api.create(&challenge.manifest(), target_port).await;
    assert_eq!(created.status, 201, "{}", created.json);
    let id = created.stack_id();
    let (status, _) = poll_status(api, &id, START_BOUND).await;
    assert_eq!(status.json["status"], "running", "{}", status.json);
    (id, status.json)
}

/// The participant's first connection after `running`, read to the end.
async fn banner(api: &ApiHarness, address: SocketAddr) -> String {
    match read_all(address).await {
        Ok(said) => said,
        Err(e) => panic!(
            "{address} refused a participant after `running`: {e}\n{}",
            refusal_evidence(api, address).await
        ),
    }
}

/// What a refusal after `running` needs to be explained: the harness's pods and their
/// addresses, any Service of the cluster on the port (kube-proxy sends it there instead: the
/// cause of the one such CI failure), whether and when the port answered after all, and what
/// each node's NetworkPolicy enforcer did around then.
async fn refusal_evidence(api: &ApiHarness, address: SocketAddr) -> String {
    let refused_at = jiff::Timestamp::now();
    let pods = match api.pods_api().list(&ListParams::default()).await {
        Ok(list) => list
            .items
            .iter()
            .map(|pod| {
                let status = pod.status.clone().unwrap_or_default();
                let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
                format!(
                    "{} on {node:?} at {:?} ({:?})",
                    pod.name_any(),
                    status.pod_ip,
                    status.phase
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
        Err(e) => format!("pods unreadable: {e}"),
    };
    let port = i32::from(address.port());
    let on_the_port = match Api::<Service>::all(api.env.kube.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list
            .items
            .iter()
            .filter(|service| {
                let mut ports = service.spec.iter().flat_map(|s| s.ports.iter().flatten());
                ports.any(|p| p.node_port == Some(port))
            })
            .map(|service| format!("{}/{}", service.namespace().unwrap_or_default(), service.name_any()))
            .collect::<Vec<_>>()
            .join(", "),
        Err(e) => format!("services unreadable: {e}"),
    };
    let answered = match time_until_answered(address, GONE_BOUND).await {
        Some(after) => format!("answered {after:?} later"),
        None => format!("still refused {GONE_BOUND:?} later"),
    };
    let settings = &api.env.settings;
    let syncs: Vec<String> = (1..=settings.real_nodes)
        .map(|i| format!("{}:\n{}", node_name(i), enforcer_syncs(settings, i, 6).join("\n")))
        .collect();
    format!(
        "refused at {refused_at}, {answered}; pods: {pods}; Services on port {port}: [{on_the_port}]\nthe enforcers' last syncs:\n{}",
        syncs.join("\n")
    )
}

/// Deletes stack `id` and asserts that its `address` stops answering within [`GONE_BOUND`].
async fn deleted_until_refused(api: &ApiHarness, id: &str, address: SocketAddr, what: &str) {
    api.delete_stack(id).await;
    let gone = time_until_refused(address, GONE_BOUND).await;
    assert!(
        gone.is_some(),
        "{what}: {address} still answers {GONE_BOUND:?} after the delete"
    );
}

/// What a stack of `challenge` tells a participant once running ([`banner`]); the stack is
/// deleted before the caller looks at it.
async fn said_by_a_stack(api: &ApiHarness, challenge: &Challenge, target_port: Value) -> String {
    let (id, address) = create_running(api, challenge, target_port).await;
    let said = banner(api, address).await;
    api.delete_stack(&id).await;
    said
}

#[tokio::test]
async fn a_participant_reads_the_challenge_in_both_exposure_modes_and_both_client_shapes() {
    let v1 = |protocol: &str| json!([{ "container_port": 8080, "protocol": protocol }]);
    let cases = [
        ("nodeport", (32740, 32741), v1("TCP")),
        ("nodeport", (32742, 32743), json!(8080)),
        ("hostport", (32744, 32745), v1("tcp")),
        ("hostport", (32746, 32747), json!(8080)),
    ];
    let runs = cases.into_iter().map(|(exposure, ports, target_port)| async move {
        let api = on_real_nodes(exposure, ports, &[]).await;
        let challenge = Challenge::local(api.registry(), "tcp");
        let (id, address) = create_running(&api, &challenge, target_port.clone()).await;
        assert!((ports.0..=ports.1).contains(&address.port()), "{exposure}: {address}");
        assert!(
            address.ip().to_string().starts_with("10."),
            "a real node's address: {address}"
        );

        let said = banner(&api, address).await;
        let first = said.lines().next().unwrap_or_default();
        assert_eq!(
            first,
            format!("stack-env challenge on {id} as uid 0"),
            "{exposure} {target_port}"
        );
        assert!(said.contains(&format!("flag: {}", challenge.flag)), "{said}");

        deleted_until_refused(&api, &id, address, exposure).await;
        api.finish().await;
    });
    futures::future::join_all(runs).await;
}

/// A UDP challenge, as `nc -u` reaches it: in either mode, under runc and under gVisor, the
/// participant's first datagram after `running` is answered, and none once the stack is deleted.
#[tokio::test]
async fn a_udp_challenge_answers_the_first_datagram_in_both_modes_and_runtimes() {
    // One runtime after the other on the same ports: each stack is gone before the next.
    for class in [None, Some(GVISOR_RUNTIME_CLASS)] {
        futures::future::join(
            udp_round_trip(class, "nodeport", (32764, 32765)),
            udp_round_trip(class, "hostport", (32766, 32767)),
        )
        .await;
    }
}

/// One UDP stack under `class` (runc when none): created, answered, deleted, silent.
async fn udp_round_trip(class: Option<&str>, exposure: &str, ports: (u16, u16)) {
    let what = format!("{exposure} under {}", class.unwrap_or("runc"));
    let api = on_real_nodes_under(class, exposure, ports).await;
    let challenge = Challenge::local(api.registry(), "udp");
    let target_port = json!([{ "container_port": UDP_PORT, "protocol": "UDP" }]);
    let (id, address) = create_running(&api, &challenge, target_port).await;
    let (said, sent) = udp_exchange(address, Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| panic!("{what}: {address} after `running`: {e}"));
    assert_eq!(
        said,
        format!("stack-env udp challenge on {id}\nflag: {}\n", challenge.flag),
        "{what}"
    );
    assert_eq!(sent, 1, "{what}: datagrams sent until one was answered");

    api.delete_stack(&id).await;
    let gone = udp_time_until_silent(address, GONE_BOUND).await;
    assert!(
        gone.is_some(),
        "{what}: {address} still answers {GONE_BOUND:?} after the delete"
    );
    api.finish().await;
}

/// A participant who keeps `nc -u` open, typing, while the platform restarts the challenge (the
/// stack deleted, a new one made on the same node and port) reaches the new stack from that same
/// socket: no connection-tracking entry to the old pod's address keeps its datagrams (portmap
/// and kube-proxy clear a UDP port's entries when its target changes).
#[tokio::test]
async fn a_udp_participant_who_keeps_its_socket_reaches_the_stack_made_again_on_its_port() {
    let cases = [("nodeport", 32694), ("hostport", 32695)];
    let runs = cases.into_iter().map(|(exposure, port)| async move {
        let api = on_real_nodes(exposure, (port, port), &[]).await;
        // One node for both stacks, so that the participant's address is the same; not the
        // fork bomb's.
        let challenge = Challenge::local(api.registry(), "udp").on_node(&node_name(2));
        let target_port = json!([{ "container_port": UDP_PORT, "protocol": "UDP" }]);
        let (first, address) = create_running(&api, &challenge, target_port.clone()).await;
        let participant = UdpParticipant::connect(address).await.unwrap();
        let (said, _) = participant
            .exchange(Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("{exposure}: {address}: {e}"));
        assert!(said.contains(&first), "{exposure}: {said}");

        api.delete_stack(&first).await;
        let deleted = Instant::now();
        while participant.exchange(Duration::from_millis(500)).await.is_ok() {
            assert!(deleted.elapsed() < GONE_BOUND, "{exposure}: {address} still answers");
        }
        // The port is free once the old pod is gone (until then a create answers 503).
        let left = api.managed_pods_once_deleted_ones_are_gone().await;
        assert!(left.is_empty(), "{exposure}: the deleted stack's pod is still there");
        let (second, again) = create_running(&api, &challenge, target_port).await;
        assert_eq!(again, address, "{exposure}: the same node and port");
        let (said, sent) = participant
            .exchange(Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("{exposure}: the same socket to {address} after the new stack runs: {e}"));
        assert!(said.contains(&second), "{exposure}: {said}");
        assert_eq!(sent, 1, "{exposure}: datagrams sent until the new stack answered");
        api.delete_stack(&second).await;
        api.finish().await;
    });
    futures::future::join_all(runs).await;
}

/// The request the platforms' own sample sends (`events/create-v1.json`): a challenge with a
/// TCP and a UDP port, here a container each. Both answer as soon as the stack is `running`.
#[tokio::test]
async fn a_stack_with_a_tcp_and_a_udp_port_answers_on_both_in_both_modes() {
    let cases = [("nodeport", (32690, 32691)), ("hostport", (32692, 32693))];
    let runs = cases.into_iter().map(|(exposure, ports)| async move {
        let api = on_real_nodes(exposure, ports, &[]).await;
        let tcp = Challenge::local(api.registry(), "tcp").with_cpu("100m");
        let udp = Challenge::local(api.registry(), "udp").with_cpu("100m");
        let manifest = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: two-ports\nspec:\n  containers:\n{}{}",
            tcp.container("web"),
            udp.container("dns")
        );
        let target_port = json!([
            { "container_port": tcp.port, "protocol": "TCP" },
            { "container_port": udp.port, "protocol": "UDP" },
        ]);
        let created = api.create(&manifest, target_port).await;
        assert_eq!(created.status, 201, "{exposure}: {}", created.json);
        let id = created.stack_id();
        let (status, _) = poll_status(&api, &id, START_BOUND).await;
        assert_eq!(status.json["status"], "running", "{exposure}: {}", status.json);
        let protocols = [
            &status.json["ports"][0]["protocol"],
            &status.json["ports"][1]["protocol"],
        ];
        assert_eq!(protocols, ["TCP", "UDP"], "{exposure}: {}", status.json);
        let at = |i: usize| port_address(&status.json, i).unwrap_or_else(|| panic!("{exposure}: {}", status.json));

        let said = banner(&api, at(0)).await;
        assert!(said.contains(&format!("flag: {}", tcp.flag)), "{exposure}: {said}");
        let (said, sent) = udp_exchange(at(1), Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("{exposure}: {} after `running`: {e}", at(1)));
        assert!(said.contains(&format!("flag: {}", udp.flag)), "{exposure}: {said}");
        assert_eq!(sent, 1, "{exposure}: datagrams sent until one was answered");
        api.delete_stack(&id).await;
        api.finish().await;
    });
    futures::future::join_all(runs).await;
}

/// The kernel this machine runs, which the real nodes share: what a participant's calls reach
/// under runc.
fn the_nodes_kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .expect("this machine's kernel release")
        .trim()
        .to_owned()
}

#[tokio::test]
async fn the_runtime_applies_the_forced_hardening_seen_from_inside() {
    // runc and gVisor (the operator's STACK_RUNTIME_CLASS): the same hardening either way.
    let runtimes = [(None, (32748, 32749)), (Some(GVISOR_RUNTIME_CLASS), (32750, 32751))];
    let runs = runtimes.into_iter().map(|(class, ports)| async move {
        let api = on_real_nodes_under(class, "nodeport", ports).await;
        let challenge = Challenge::local(api.registry(), "tcp");
        let said = said_by_a_stack(&api, &challenge, json!(8080)).await;
        let runtime = class.unwrap_or("runc");
        assert_eq!(
            status_field(&said, "Seccomp"),
            Some("2"),
            "{runtime}: seccomp RuntimeDefault: {said}"
        );
        assert_eq!(status_field(&said, "NoNewPrivs"), Some("1"), "{runtime}: {said}");
        let caps = status_field(&said, "CapEff").unwrap_or_else(|| panic!("no CapEff in {said}"));
        assert!(
            !has_capability(caps, CAP_NET_RAW),
            "{runtime}: NET_RAW must be dropped: CapEff {caps}"
        );
        assert_eq!(
            status_field(&said, "token"),
            Some("absent"),
            "{runtime}: no service account token: {said}"
        );
        let kernel = status_field(&said, "kernel").unwrap_or_else(|| panic!("no kernel in {said}"));
        if class.is_none() {
            assert_eq!(kernel, the_nodes_kernel(), "runc shares the node's kernel: {said}");
            assert_eq!(
                status_field(&said, "cpu_quota"),
                Some("20000/100000"),
                "the manifest's 200m CPU limit is a CFS quota: {said}"
            );
        } else {
            // The quota holds the sandbox on the node; gVisor's Sentry does not show it inside.
            assert_ne!(
                kernel,
                the_nodes_kernel(),
                "gVisor's own kernel, not the node's: {said}"
            );
        }
        api.finish().await;
    });
    futures::future::join_all(runs).await;
}

#[tokio::test]
async fn without_cpu_limits_a_stack_runs_without_a_cpu_quota() {
    let api = on_real_nodes("hostport", (32712, 32713), &[("STACK_CPU_LIMITS", "false")]).await;
    let challenge = Challenge::local(api.registry(), "tcp").with_cpu("75m");
    let (id, address) = create_running(&api, &challenge, json!(8080)).await;
    let said = banner(&api, address).await;
    assert_eq!(status_field(&said, "cpu_quota"), Some("none"), "{said}");
    assert_eq!(status_field(&said, "Seccomp"), Some("2"), "the hardening holds: {said}");
    let stack = api.call(Method::GET, &format!("/stacks/{id}"), None).await;
    assert_eq!(
        stack.json["requested_cpu_milli"], 75,
        "the limit became the request: {}",
        stack.json
    );
    api.delete_stack(&id).await;
    api.finish().await;
}

/// kube-proxy forwards a Service's node port on every node ahead of a pod's host port: a
/// Service made on a running stack's port takes its participants (here to a port of the node
/// where nothing listens), while the stack itself runs on. The next reader fails the stack,
/// naming the Service.
#[tokio::test]
async fn a_service_made_on_a_running_stacks_port_takes_its_participants_and_fails_the_stack() {
    let api = on_real_nodes("hostport", (32732, 32733), &[]).await;
    let challenge = Challenge::local(api.registry(), "tcp");
    let (id, address) = create_running(&api, &challenge, json!(8080)).await;
    banner(&api, address).await;

    let elsewhere = api.env.fresh_namespace("taker").await.expect("namespace");
    let service: Service = serde_json::from_value(json!({
        "metadata": { "name": "taker" },
        "spec": {
            "type": "NodePort",
            "ports": [{ "port": 80, "targetPort": 9, "nodePort": address.port() }]
        }
    }))
    .expect("valid service");
    // Without a selector, its one endpoint is the node's own port 9.
    let endpoints: EndpointSlice = serde_json::from_value(json!({
        "metadata": { "name": "taker", "labels": { "kubernetes.io/service-name": "taker" } },
        "addressType": "IPv4",
        "endpoints": [{ "addresses": [address.ip().to_string()] }],
        "ports": [{ "port": 9, "protocol": "TCP" }]
    }))
    .expect("valid endpoint slice");
    let create = PostParams::default();
    elsewhere
        .api::<Service>()
        .create(&create, &service)
        .await
        .expect("service");
    elsewhere
        .api::<EndpointSlice>()
        .create(&create, &endpoints)
        .await
        .expect("endpoint slice");

    assert!(
        time_until_refused(address, GONE_BOUND).await.is_some(),
        "{address} still reaches the challenge {GONE_BOUND:?} after a Service took its port"
    );
    let pod = api.pods_api().get(&id).await.expect("the stack's pod");
    let phase = pod.status.and_then(|s| s.phase);
    assert_eq!(phase.as_deref(), Some("Running"), "the stack itself runs on");

    TestReconciler::over(&api, &[]).await.pass().await;
    let status = api.call(Method::GET, &format!("/stacks/{id}/status"), None).await;
    let (reason, message) = status.failure();
    assert_eq!(reason, "port_taken");
    let taker = format!("{}/taker", elsewhere.name());
    assert!(message.contains(&taker), "names {taker}: {message}");
    elsewhere.delete().await.expect("delete namespace");
    api.finish().await;
}

#[tokio::test]
async fn with_user_namespaces_root_in_a_stack_is_an_unprivileged_user_of_the_node() {
    let api = on_real_nodes("hostport", (32726, 32727), &[("STACK_USER_NAMESPACES", "true")]).await;
    let challenge = Challenge::local(api.registry(), "tcp");
    let said = said_by_a_stack(&api, &challenge, json!(8080)).await;
    assert!(said.lines().next().unwrap_or_default().ends_with("as uid 0"), "{said}");
    // "0 <host uid> 65536": root here is a high, unprivileged uid on the node.
    let map: Vec<u64> = status_field(&said, "uid_map")
        .unwrap_or_else(|| panic!("no uid_map in {said}"))
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    assert_eq!(map.len(), 3, "{said}");
    assert_eq!(map[0], 0, "{said}");
    assert!(map[1] >= 65536, "root maps to an unprivileged node uid: {said}");
    assert_eq!(map[2], 65536, "{said}");
    assert_eq!(
        status_field(&said, "Seccomp"),
        Some("2"),
        "the rest of the hardening holds: {said}"
    );

    // Without the setting, root is the node's root (what the setting exists to change).
    let plain = on_real_nodes("hostport", (32728, 32729), &[]).await;
    let said = said_by_a_stack(&plain, &challenge, json!(8080)).await;
    assert_eq!(status_field(&said, "uid_map"), Some("0 0 4294967295"), "{said}");
    plain.finish().await;
    api.finish().await;
}

#[tokio::test]
async fn an_authors_tightening_is_applied_seen_from_inside() {
    let api = on_real_nodes("hostport", (32708, 32709), &[]).await;
    // The tcp image runs as root with a writable root filesystem unless its manifest says not.
    let challenge = Challenge::local(api.registry(), "tcp")
        .with_security_context("{runAsUser: 1000, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}");
    let said = said_by_a_stack(&api, &challenge, json!(8080)).await;
    assert!(
        said.lines().next().unwrap_or_default().ends_with("as uid 1000"),
        "runAsUser: {said}"
    );
    assert_eq!(
        status_field(&said, "rootfs"),
        Some("ro"),
        "readOnlyRootFilesystem: {said}"
    );
    // The bounding set: a non-root process has no effective capabilities whatever is dropped.
    assert_eq!(
        status_field(&said, "CapBnd"),
        Some("0000000000000000"),
        "drop ALL: {said}"
    );
    // The forced settings hold beside the author's.
    assert_eq!(status_field(&said, "Seccomp"), Some("2"), "{said}");
    assert_eq!(status_field(&said, "NoNewPrivs"), Some("1"), "{said}");
    assert!(said.contains(&challenge.flag), "{said}");
    api.finish().await;
}

#[tokio::test]
async fn a_root_image_under_run_as_non_root_ends_failed_with_the_kubelets_reason() {
    let api = on_real_nodes("hostport", (32710, 32711), &[]).await;
    // The tcp image's user is root: the kubelet refuses to start it under runAsNonRoot.
    let challenge = Challenge::local(api.registry(), "tcp").with_security_context("{runAsNonRoot: true}");
    let created = api.create(&challenge.manifest(), json!(8080)).await;
    assert_eq!(
        created.status, 201,
        "accepted: the image's user is the kubelet's to judge: {}",
        created.json
    );
    let id = created.stack_id();
    let (status, _) = poll_status(&api, &id, START_BOUND).await;
    let (reason, message) = status.failure();
    assert_eq!(reason, "container_config_error");
    assert!(message.contains("runAsNonRoot"), "the kubelet's message: {message}");
    api.delete_stack(&id).await;
    api.finish().await;
}

#[tokio::test]
async fn a_challenge_that_listens_late_answers_its_first_request_once_running() {
    // Under runc and under gVisor, where the probe the provisioner adds is a startup probe.
    let runtimes = [(None, (32752, 32755)), (Some(GVISOR_RUNTIME_CLASS), (32760, 32763))];
    let runs = runtimes.into_iter().map(|(class, ports)| async move {
        let api = on_real_nodes_under(class, "hostport", ports).await;
        let runtime = class.unwrap_or("runc");
        // It sleeps 3 s before listening: with its own readiness probe, and with none (the
        // provisioner's TCP probe stands in).
        let plain = Challenge::local(api.registry(), "http");
        for challenge in [plain.clone().with_http_readiness(), plain] {
            let declared = challenge.manifest().contains("readinessProbe");
            let created_at = Instant::now();
            let created = api.create(&challenge.manifest(), json!(8080)).await;
            assert_eq!(created.status, 201, "{}", created.json);
            assert_eq!(created.json["status"], "creating", "not ready yet: {}", created.json);
            let id = created.stack_id();
            let (status, seen) = poll_status(&api, &id, START_BOUND).await;
            assert_eq!(status.json["status"], "running", "{}", status.json);
            assert!(
                created_at.elapsed() >= Duration::from_secs(3),
                "{runtime}, probe declared: {declared}; running after {:?}, before the challenge listens; statuses {seen:?}",
                created_at.elapsed()
            );
            let address = address_of(&status.json).expect("address");
            let (code, body) = http_get(address, "/").await.unwrap_or_else(|e| {
                panic!("{runtime}, probe declared: {declared}; first request after `running` failed: {e}")
            });
            assert_eq!((code, body.trim()), (200, "stack-env http challenge"));
            api.delete_stack(&id).await;
        }
        api.finish().await;
    });
    futures::future::join_all(runs).await;
}

#[tokio::test]
async fn a_non_root_challenge_binds_a_port_below_1024() {
    let api = on_real_nodes("hostport", (32756, 32759), &[]).await;
    let challenge = Challenge::local(api.registry(), "lowport");
    let said = said_by_a_stack(&api, &challenge, json!(80)).await;
    assert!(
        said.lines().next().unwrap_or_default().ends_with("as uid 1000"),
        "{said}"
    );
    api.finish().await;
}

/// How each failing image ends: its reason, and how long a platform may have to wait for it.
struct Failing {
    what: &'static str,
    challenge: fn(&str, &str) -> Challenge,
    reason: &'static str,
    within: Duration,
}

#[tokio::test]
async fn a_stack_that_cannot_start_ends_failed_with_its_reason_and_frees_its_port() {
    // The start deadline (at least the scheduling timeout) is short here so that transient
    // troubles end within the test.
    const START_TIMEOUT: &str = "30s";
    let cases = [
        Failing {
            what: "a tag the registry does not have",
            challenge: |registry, _| Challenge::of_image(&format!("{registry}/stack-env/none:404"), 8080),
            reason: "image_not_found",
            within: Duration::from_secs(25),
        },
        Failing {
            what: "an entrypoint that exits 3",
            challenge: |registry, _| Challenge::local(registry, "crash"),
            reason: "container_exited",
            within: Duration::from_secs(25),
        },
        Failing {
            what: "a registry that is down",
            challenge: |_, down| Challenge::of_image(&format!("{down}/stack-env/tcp:1"), 8080),
            reason: "image_pull_failed",
            within: Duration::from_secs(50),
        },
        Failing {
            what: "a challenge never ready",
            challenge: |registry, _| {
                Challenge::local(registry, "http")
                    .with_http_readiness()
                    .with_env("DELAY", "600")
            },
            reason: "start_timeout",
            within: Duration::from_secs(50),
        },
    ];
    let runs = cases.into_iter().zip(32700_u16..).map(|(case, port)| async move {
        let probe = on_real_nodes("hostport", (port, port), &[]).await;
        let registry = probe.registry().to_owned();
        probe.finish().await;
        // Nothing listens on port 1 of the registry's host.
        let down = format!("{}:1", registry.split(':').next().unwrap_or_default());
        let allowlist = format!("{registry}/,{down}/");
        let api = on_real_nodes(
            "hostport",
            (port, port),
            &[
                ("STACK_IMAGE_ALLOWLIST", &allowlist),
                ("STACK_SCHEDULING_TIMEOUT", "20s"),
                ("STACK_START_TIMEOUT", START_TIMEOUT),
            ],
        )
        .await;
        let created = api
            .create(&(case.challenge)(&registry, &down).manifest(), json!(8080))
            .await;
        assert_eq!(created.status, 201, "{}: {}", case.what, created.json);
        let id = created.stack_id();
        let (status, _) = poll_status(&api, &id, case.within).await;
        assert_eq!(status.json["status"], "failed", "{}: {}", case.what, status.json);
        assert_eq!(status.json["reason"], case.reason, "{}: {}", case.what, status.json);
        assert!(
            status.json["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{}: {}",
            case.what,
            status.json
        );
        // Still readable as failed, its objects gone.
        let read = api.call(Method::GET, &format!("/stacks/{id}"), None).await;
        assert_eq!(
            (read.status, read.json["status"].as_str()),
            (200, Some("failed")),
            "{}",
            read.json
        );
        // Its pod leaves once its kubelet has stopped it (a one-second grace period).
        let deadline = Instant::now() + GONE_BOUND;
        while !api.managed_pods().await.is_empty() {
            assert!(Instant::now() < deadline, "{}: its pod is left", case.what);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // Its only port serves the next stack.
        let next = Challenge::local(&registry, "tcp");
        let (next_id, address) = create_running(&api, &next, json!(8080)).await;
        assert_eq!(address.port(), port, "{}", case.what);
        assert!(banner(&api, address).await.contains(&next.flag), "{}", case.what);
        api.delete_stack(&next_id).await;
        api.delete_stack(&id).await;
        api.finish().await;
    });
    futures::future::join_all(runs).await;
}

#[tokio::test]
async fn under_gvisor_a_participant_reads_the_challenge_on_a_kernel_that_is_not_the_nodes() {
    // Both exposure modes: the Sentry's netstack behind the pod's veth, then portmap or
    // kube-proxy on the node, as under runc.
    let cases = [("hostport", (32704, 32705)), ("nodeport", (32714, 32715))];
    let runs = cases.into_iter().map(|(exposure, ports)| async move {
        let api = on_real_nodes_under(Some(GVISOR_RUNTIME_CLASS), exposure, ports).await;
        let challenge = Challenge::local(api.registry(), "tcp");
        let (id, address) = create_running(&api, &challenge, json!(8080)).await;
        let said = banner(&api, address).await;
        assert!(
            said.contains(&format!("flag: {}", challenge.flag)),
            "{exposure}: {said}"
        );
        let kernel = status_field(&said, "kernel").unwrap_or_else(|| panic!("no kernel in {said}"));
        assert_ne!(kernel, the_nodes_kernel(), "{exposure}: {said}");
        let spec = api
            .pods_api()
            .get(&id)
            .await
            .expect("the stack's pod")
            .spec
            .unwrap_or_default();
        assert_eq!(spec.runtime_class_name.as_deref(), Some(GVISOR_RUNTIME_CLASS));
        // The stack reserves what the scheduler counts: the challenge's 200m and 32Mi, and the
        // sandbox's overhead that the RuntimeClass gave the pod (50m, 32Mi).
        let overhead = spec.overhead.unwrap_or_default();
        let given: Vec<&str> = ["cpu", "memory"]
            .iter()
            .map(|r| overhead.get(*r).map_or("", |q| q.0.as_str()))
            .collect();
        assert_eq!(given, ["50m", "32Mi"], "{exposure}");
        let stack = api.call(Method::GET, &format!("/stacks/{id}"), None).await;
        let reserved = (
            &stack.json["requested_cpu_milli"],
            &stack.json["requested_memory_bytes"],
        );
        assert_eq!(reserved, (&json!(250), &json!(64 << 20)), "{exposure}: {}", stack.json);
        deleted_until_refused(&api, &id, address, exposure).await;
        api.finish().await;
    });
    futures::future::join_all(runs).await;
}

#[tokio::test]
async fn a_runtime_class_the_cluster_lacks_refuses_creates_with_503_naming_it() {
    let api = ApiHarness::with_env(&[("STACK_RUNTIME_CLASS", "no-such-sandbox")]).await;
    let created = api.create(WEB_POD, json!(80)).await;
    assert_eq!(created.status, 503, "{}", created.json);
    assert!(created.error().contains("no-such-sandbox"), "{}", created.json);
    assert!(api.managed_pods().await.is_empty(), "nothing created");
    api.finish().await;
}

/// A participant who fills the disk from a shell (here a second port that runs `dd` for
/// whoever connects) does not fill the node's: under runc the kubelet evicts the pod past its
/// ephemeral-storage limit (`evicted`, with the kubelet's words); under gVisor, whose root
/// filesystem the nodes keep in the sandbox's memory, the writes meet the memory limit at once
/// (`container_exited`, OOMKilled). Either way its port serves the next stack.
#[tokio::test]
async fn a_stack_that_fills_its_disk_ends_failed_and_its_port_serves_the_next() {
    let cases = [
        (None, (32696, 32697), "evicted", "ephemeral local storage"),
        (
            Some(GVISOR_RUNTIME_CLASS),
            (32698, 32699),
            "container_exited",
            "OOMKilled",
        ),
    ];
    let runs = cases.into_iter().map(|(class, ports, reason, words)| async move {
        let what = class.unwrap_or("runc");
        let mut extra = vec![("STACK_EPHEMERAL_STORAGE_LIMIT", "32Mi")];
        extra.extend(class.map(|c| ("STACK_RUNTIME_CLASS", c)));
        let api = on_real_nodes("nodeport", ports, &extra).await;
        let filler =
            Challenge::local(api.registry(), "tcp").with_shell_running("dd if=/dev/zero of=/fill bs=1M count=64");
        let (id, shell) = create_with_shell(&api, &filler, what).await;
        let _filling = tokio::net::TcpStream::connect(shell)
            .await
            .unwrap_or_else(|e| panic!("{what}: {shell}: {e}"));

        let (ended, _) = poll_status_past(&api, &id, "running", EVICTED_WITHIN).await;
        let status = ended.json;
        let failure = (&status["status"], &status["reason"]);
        assert_eq!(failure, (&json!("failed"), &json!(reason)), "{what}: {status}");
        let message = status["message"].as_str().unwrap_or_default();
        assert!(message.contains(words), "{what}: {status}");

        // Its port is free for the next stack.
        let next = Challenge::local(api.registry(), "tcp");
        let (next_id, address) = create_running(&api, &next, json!(8080)).await;
        assert!(banner(&api, address).await.contains(&next.flag), "{what}");
        api.delete_stack(&next_id).await;
        api.finish().await;
    });
    futures::future::join_all(runs).await;
}

/// Creates `challenge` (listening on 8080 and [`SHELL_PORT`]), checks that its first port
/// answers once `running`, and gives its id and its second port's address.
async fn create_with_shell(api: &ApiHarness, challenge: &Challenge, what: &str) -> (String, SocketAddr) {
    let target_port = json!([{ "container_port": challenge.port }, { "container_port": SHELL_PORT }]);
    let (id, status) = create_running_status(api, challenge, target_port).await;
    let address = address_of(&status).unwrap_or_else(|| panic!("{what}: {status}"));
    assert!(banner(api, address).await.contains(&challenge.flag), "{what}");
    let shell = port_address(&status, 1).unwrap_or_else(|| panic!("{what}: {status}"));
    (id, shell)
}

/// An emptyDir on the node's disk takes a write past its size (the kubelet measures it with `du`
/// only every minute or two, then evicts the stack). With `STACK_EMPTY_DIRS_IN_MEMORY` it is a
/// tmpfs of that size, under runc as under gVisor: the write fails at once, the participant is
/// told so, and the stack answers on.
#[tokio::test]
async fn a_participant_who_fills_an_empty_dir_in_memory_meets_its_size_and_the_stack_answers_on() {
    let cases = [
        (None, false, (32680, 32681)),
        (None, true, (32682, 32683)),
        (Some(GVISOR_RUNTIME_CLASS), true, (32684, 32685)),
    ];
    let runs = cases.into_iter().map(|(class, in_memory, ports)| async move {
        let what = format!(
            "{}, {}",
            class.unwrap_or("runc"),
            if in_memory { "in memory" } else { "on disk" }
        );
        let mut extra = vec![
            ("STACK_EPHEMERAL_STORAGE_LIMIT", "16Mi"),
            ("STACK_EMPTY_DIRS_IN_MEMORY", if in_memory { "true" } else { "false" }),
        ];
        extra.extend(class.map(|c| ("STACK_RUNTIME_CLASS", c)));
        let api = on_real_nodes("nodeport", ports, &extra).await;
        let filler = Challenge::local(api.registry(), "tcp")
            .with_shell_running(&format!("dd if=/dev/zero of={SCRATCH}/fill bs=1M count=64"));
        let (id, shell) = create_with_shell(&api, &filler, &what).await;
        let said = read_all(shell).await.unwrap_or_else(|e| panic!("{what}: {shell}: {e}"));
        if !in_memory {
            // All 64 MiB went to the node's disk, past the 16 MiB the stack may use.
            assert!(said.contains("64+0 records out"), "{what}: {said}");
            api.finish().await;
            return;
        }
        assert!(said.contains("No space left on device"), "{what}: {said}");
        // Past the kubelet's next checks, the stack still runs and answers.
        let checked = Instant::now() + Duration::from_secs(15);
        let status = loop {
            let reply = api.call(Method::GET, &format!("/stacks/{id}/status"), None).await;
            assert_eq!(reply.json["status"], "running", "{what}: {}", reply.json);
            if Instant::now() > checked {
                break reply.json;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        let address = address_of(&status).unwrap_or_else(|| panic!("{what}: {status}"));
        assert!(banner(&api, address).await.contains(&filler.flag), "{what}");
        api.delete_stack(&id).await;
        api.finish().await;
    });
    futures::future::join_all(runs).await;
}

#[tokio::test]
async fn a_fork_bomb_in_one_stack_leaves_its_neighbour_answering_and_the_node_ready() {
    use k8s_openapi::api::core::v1::Node;
    const NODE: &str = "stack-node-1";
    let api = on_real_nodes("hostport", (32706, 32707), &[]).await;
    // Both on the same node: the neighbour shares its kernel and its kubelet.
    let neighbour = Challenge::local(api.registry(), "tcp").on_node(NODE);
    let (neighbour_id, address) = create_running(&api, &neighbour, json!(8080)).await;

    // A participant's fork bomb: the container's shell forks without end.
    let bomb = Challenge::local(api.registry(), "tcp")
        .on_node(NODE)
        .with_script("bomb() { bomb | bomb & }; bomb; sleep 3600");
    let created = api.create(&bomb.manifest(), json!(8080)).await;
    assert_eq!(created.status, 201, "{}", created.json);
    let bomb_id = created.stack_id();
    tokio::time::sleep(Duration::from_secs(10)).await;

    let said = banner(&api, address).await;
    assert!(
        said.contains(&neighbour.flag),
        "the neighbour stopped answering: {said}"
    );
    let node = kube::Api::<Node>::all(api.env.kube.clone())
        .get(NODE)
        .await
        .expect("the node");
    let ready = node
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    assert!(ready, "{NODE} is no longer Ready");
    // On a 6.18 kernel the bomb's killed processes, parked by its CPU limit, may never exit and
    // its pod stays Terminating; `tests/env/down` lifts the quota so they can.
    api.delete_stack(&bomb_id).await;
    api.delete_stack(&neighbour_id).await;
    api.finish().await;
}
