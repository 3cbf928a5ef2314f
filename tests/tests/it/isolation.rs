//! The stacks' isolation as a participant's shell meets it on the real nodes, whose NetworkPolicy
//! enforcer (kube-router's firewall) plays EKS's VPC CNI agent: from inside a stack, the node's
//! metadata service, the apiserver, a host of the "VPC" and another stack (of another tenant:
//! the namespace's one isolation policy is what keeps tenants apart) are closed, the
//! cluster's DNS port and the internet open; the stack's own port still answers from outside.
//!
//! Every closed target is shown open from a pod the isolation does not select (the control),
//! or from this machine for the other stack, so a closed port is the policy's doing, not the
//! network's.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use http::Method;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use stack_tests::api::{API_KEY, ApiHarness};
use stack_tests::challenges::Challenge;
use stack_tests::env::{real_nodes, unique_name};
use stack_tests::participant::{address_of, read_all, read_all_within};
use stack_tests::tenants::{self, ALL_OPERATOR, CTF_PLATFORM, WARGAME_PLATFORM};
use tokio::net::TcpListener;

const START_BOUND: Duration = Duration::from_secs(60);
/// A banner with probes: each closed target may cost the probe's 2 s.
const PROBES_BOUND: Duration = Duration::from_secs(30);

/// `probe <target>: open|closed` lines of a banner, by target.
fn probes(banner: &str) -> BTreeMap<String, String> {
    banner
        .lines()
        .filter_map(|line| line.strip_prefix("probe "))
        .filter_map(|rest| rest.split_once(": "))
        .map(|(target, state)| (target.to_owned(), state.to_owned()))
        .collect()
}

/// A listener on `host` that accepts for as long as the test runs: a host of the "VPC" or of
/// the internet.
async fn listener_on(host: &str) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind((host, 0)).await.expect("bind a test host");
    let addr = listener.local_addr().expect("address");
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            drop(stream);
        }
    });
    (addr, task)
}

async fn wait_running(api: &ApiHarness, key: &str, id: &str) -> SocketAddr {
    let started = std::time::Instant::now();
    loop {
        let reply = api
            .call_as(key, Method::GET, &format!("/stacks/{id}/status"), None)
            .await;
        if reply.json["status"] == "running" {
            return address_of(&reply.json).expect("address");
        }
        assert_ne!(reply.json["status"], "failed", "{}", reply.json);
        assert!(started.elapsed() < START_BOUND, "{id} not running: {}", reply.json);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn pod_ip(pods: &Api<Pod>, name: &str) -> String {
    let started = std::time::Instant::now();
    loop {
        let pod = pods.get(name).await.expect("pod");
        let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone());
        let ready = pod
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if let (Some(ip), true) = (ip, ready) {
            return ip;
        }
        assert!(started.elapsed() < START_BOUND, "{name} not ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A stand-in of the cluster's DNS in `kube-system` (labelled as CoreDNS is) on a real node,
/// listening on 53 and on 8053; it also probes `targets` itself, outside the isolation.
async fn dns_stand_in(api: &ApiHarness, targets: &str) -> (Api<Pod>, String, String) {
    let pods: Api<Pod> = Api::namespaced(api.env.kube.clone(), "kube-system");
    let name = unique_name("dns");
    let image = real_nodes::image(api.registry(), "tcp");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"k8s-app": "kube-dns"}},
        "spec": {
            "nodeSelector": {"role": real_nodes::STACK_ROLE},
            "restartPolicy": "Never",
            "activeDeadlineSeconds": 300,
            "automountServiceAccountToken": false,
            "containers": [{
                "name": "dns",
                "image": image,
                "command": ["sh", "-c", "nc -ll -p 53 -e /bin/banner & exec nc -ll -p 8053 -e /bin/banner"],
                "env": [{"name": "PROBES", "value": targets}],
                "readinessProbe": {"tcpSocket": {"port": 8053}, "periodSeconds": 1},
            }],
        },
    }))
    .expect("dns pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create the DNS stand-in");
    let ip = pod_ip(&pods, &name).await;
    (pods, name, ip)
}

#[tokio::test]
async fn a_stack_reaches_dns_and_the_internet_and_nothing_private_and_no_stack_reaches_it() {
    let tenants = tenants::settings(&[]);
    let mut vars = vec![
        ("STACK_EXPOSURE", "hostport"),
        ("STACK_NODEPORT_MIN", "32720"),
        ("STACK_NODEPORT_MAX", "32723"),
    ];
    vars.extend(tenants.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let api = ApiHarness::on_real_nodes(&vars).await;
    let create_as = |key: &'static str, manifest: String| {
        let api = &api;
        async move {
            let body = json!({"pod_spec": manifest, "target_port": 8080});
            api.call_as(key, Method::POST, "/stacks", Some(body)).await
        }
    };
    let settings = &api.env.settings;
    let registry = api.registry().to_owned();
    let host = real_nodes::registry_host(&registry).to_owned();
    let internet_host = settings.internet_host.clone().expect("STACK_ENV_INTERNET_HOST");
    let (vpc, _vpc_task) = listener_on(&host).await;
    let (internet, _internet_task) = listener_on(&internet_host).await;
    let apiserver = {
        let config = stack_tests::api::kube_config(&api.env).await;
        let uri = config.cluster_url;
        format!(
            "{}:{}",
            uri.host().expect("apiserver host"),
            uri.port_u16().expect("apiserver port")
        )
    };

    // Another tenant's stack: its challenge port on its pod address is what a scan would find.
    let neighbour = Challenge::local(&registry, "tcp");
    let created = create_as(WARGAME_PLATFORM.key, neighbour.manifest()).await;
    assert_eq!(created.status, 201, "{}", created.json);
    let neighbour_id = created.json["stack_id"].as_str().expect("id").to_owned();
    let neighbour_public = wait_running(&api, WARGAME_PLATFORM.key, &neighbour_id).await;
    let stack_pods: Api<Pod> = Api::namespaced(api.env.kube.clone(), &api.namespace);
    let neighbour_ip = pod_ip(&stack_pods, &neighbour_id).await;
    let neighbour_pod = format!("{neighbour_ip}:8080");
    // It listens there: this machine (let in as an on-site network would be) reads it.
    let direct = read_all(neighbour_pod.parse().expect("addr"))
        .await
        .expect("the neighbour's pod port");
    assert!(direct.contains(&neighbour.flag), "{direct}");

    let metadata = "169.254.169.254:80".to_owned();
    let controls = [
        metadata.clone(),
        apiserver.clone(),
        vpc.to_string(),
        internet.to_string(),
    ]
    .join(" ");
    let (dns_pods, dns_name, dns_ip) = dns_stand_in(&api, &controls).await;
    let (dns, dns_other_port) = (format!("{dns_ip}:53"), format!("{dns_ip}:8053"));

    // Outside the isolation every target answers: the network carries them.
    let control = read_all_within(format!("{dns_ip}:8053").parse().expect("addr"), PROBES_BOUND)
        .await
        .expect("the control pod");
    let seen = probes(&control);
    for target in [&metadata, &apiserver, &vpc.to_string(), &internet.to_string()] {
        assert_eq!(
            seen.get(target).map(String::as_str),
            Some("open"),
            "control {target}: {control}"
        );
    }

    // A participant's shell in a stack.
    let targets = [
        metadata.clone(),
        apiserver.clone(),
        vpc.to_string(),
        neighbour_pod.clone(),
        neighbour_public.to_string(),
        dns.clone(),
        dns_other_port.clone(),
        internet.to_string(),
    ];
    let shell = Challenge::local(&registry, "tcp").with_env("PROBES", &targets.join(" "));
    let created = create_as(CTF_PLATFORM.key, shell.manifest()).await;
    assert_eq!(created.status, 201, "{}", created.json);
    let shell_id = created.json["stack_id"].as_str().expect("id").to_owned();
    let address = wait_running(&api, CTF_PLATFORM.key, &shell_id).await;
    // Its own port still answers a participant from outside.
    let first = read_all_within(address, PROBES_BOUND)
        .await
        .expect("the stack's own port");
    eprintln!("FIRST READ:\n{first}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let said = read_all_within(address, PROBES_BOUND)
        .await
        .expect("the stack's own port");
    assert!(said.contains(&shell.flag), "{said}");
    let seen = probes(&said);
    let expected = [
        (&metadata, "closed"),
        (&apiserver, "closed"),
        (&vpc.to_string(), "closed"),
        (&neighbour_pod, "closed"),
        (&neighbour_public.to_string(), "closed"),
        (&dns, "open"),
        (&dns_other_port, "closed"),
        (&internet.to_string(), "open"),
    ];
    let wrong: Vec<String> = expected
        .iter()
        .filter(|(target, state)| seen.get(target.as_str()).map(String::as_str) != Some(*state))
        .map(|(target, state)| format!("{target}: expected {state}, saw {:?}", seen.get(target.as_str())))
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}\n{said}");

    let _ = dns_pods.delete(&dns_name, &DeleteParams::default()).await;
    for id in [shell_id, neighbour_id] {
        api.call_as(ALL_OPERATOR.key, Method::DELETE, &format!("/stacks/{id}"), None)
            .await;
    }
    api.finish().await;
}

#[tokio::test]
async fn without_an_enforcer_a_stack_fails_isolation_not_enforced_instead_of_running_open() {
    use stack_tests::env::processes::Component;
    let api = ApiHarness::on_real_nodes_alone(&[
        ("STACK_EXPOSURE", "hostport"),
        ("STACK_NODEPORT_MIN", "32724"),
        ("STACK_NODEPORT_MAX", "32725"),
    ])
    .await;
    let settings = api.env.settings.clone();
    // The enforcer of every node stops: a new pod gets no rules.
    let paused: Vec<_> = (1..=settings.real_nodes)
        .map(|i| {
            Component::find(&settings, &format!("{}-kube-router", real_nodes::node_name(i)))
                .expect("the node's enforcer")
                .pause()
                .expect("pause it")
        })
        .collect();
    let challenge = Challenge::local(api.registry(), "tcp");
    let created = api.create(&challenge.manifest(), json!(8080)).await;
    assert_eq!(created.status, 201, "{}", created.json);
    let id = created.json["stack_id"].as_str().expect("id").to_owned();
    let started = std::time::Instant::now();
    let failed = loop {
        let reply = api.call(Method::GET, &format!("/stacks/{id}/status"), None).await;
        assert_ne!(
            reply.json["status"], "running",
            "ran with its isolation unenforced: {}",
            reply.json
        );
        if reply.json["status"] == "failed" {
            break reply.json;
        }
        assert!(started.elapsed() < START_BOUND, "{}", reply.json);
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    drop(paused);
    assert_eq!(failed["reason"], "isolation_not_enforced", "{failed}");
    let message = failed["message"].as_str().unwrap_or_default();
    assert!(message.contains("isolation not enforced"), "{message}");

    // Enforced again, stacks run again.
    let created = api.create(&challenge.manifest(), json!(8080)).await;
    assert_eq!(created.status, 201, "{}", created.json);
    let id = created.json["stack_id"].as_str().expect("id").to_owned();
    let address = wait_running(&api, API_KEY, &id).await;
    let said = read_all(address).await.expect("the stack answers");
    assert!(said.contains(&challenge.flag), "{said}");
    api.finish().await;
}
