//! The stacks' isolation as a participant's shell meets it on the real nodes, whose NetworkPolicy
//! enforcer (kube-router's firewall) plays EKS's VPC CNI agent: from inside a stack, the node's
//! metadata service, the apiserver, a host of the "VPC", another stack (of another tenant: the
//! namespace's one isolation policy is what keeps tenants apart) and the DNS pods' metrics port
//! are closed; the cluster's DNS (CoreDNS, as on EKS) resolves the cluster's names and the
//! internet host's through the resolver the kubelet gave the stack, and the internet is open; the
//! stack's own port still answers from outside.
//!
//! Every closed target is shown open from a pod the isolation does not select (the control),
//! or from this machine for the other stack, so a closed port is the policy's doing, not the
//! network's.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use http::Method;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::json;
use stack_tests::api::{API_KEY, ApiHarness, exposed_on};
use stack_tests::challenges::Challenge;
use stack_tests::env::{cluster_dns, real_nodes, unique_name};
use stack_tests::participant::{address_of, read_all, read_all_within};
use stack_tests::tenants::{ALL_OPERATOR, CTF_PLATFORM, WARGAME_PLATFORM};
use tokio::net::{TcpListener, UdpSocket};

const START_BOUND: Duration = Duration::from_secs(60);
/// A banner with probes: each closed target may cost the probe's 2 s.
const PROBES_BOUND: Duration = Duration::from_secs(30);

/// `address:10250` of each real node: its kubelet, which listens on the node's address as on
/// EKS. Whatever node a stack lands on, its own is among them.
async fn kubelets(api: &ApiHarness) -> Vec<String> {
    let (key, value) = real_nodes::REAL_NODE_LABEL;
    let nodes = Api::<Node>::all(api.env.kube.clone())
        .list(&ListParams::default().labels(&format!("{key}={value}")))
        .await
        .expect("list the real nodes");
    let address = |node: &Node| {
        let addresses = node.status.as_ref()?.addresses.as_ref()?;
        let internal = addresses.iter().find(|a| a.type_ == "InternalIP")?;
        Some(format!("{}:10250", internal.address))
    };
    let kubelets: Vec<String> = nodes.items.iter().filter_map(address).collect();
    assert_eq!(kubelets.len(), api.env.settings.real_nodes, "{kubelets:?}");
    kubelets
}

/// `probe <target>: open|closed` lines of a banner, by target.
fn probes(banner: &str) -> BTreeMap<String, String> {
    banner
        .lines()
        .filter_map(|line| line.strip_prefix("probe "))
        .filter_map(|rest| rest.split_once(": "))
        .map(|(target, state)| (target.to_owned(), state.to_owned()))
        .collect()
}

/// `lookup <name>: <address>...|failed` lines of a banner: the addresses by name (none when
/// the lookup failed).
fn lookups(banner: &str) -> BTreeMap<String, Vec<String>> {
    banner
        .lines()
        .filter_map(|line| line.strip_prefix("lookup "))
        .filter_map(|rest| rest.split_once(": "))
        .map(|(name, answer)| {
            let addresses = answer
                .split_whitespace()
                .filter(|a| *a != "failed")
                .map(str::to_owned)
                .collect();
            (name.to_owned(), addresses)
        })
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

/// [`listener_on`] over UDP: it answers every datagram, as a resolver or any UDP service
/// would. Its probe target, `udp:host:port`.
async fn udp_responder_on(host: &str) -> (String, tokio::task::JoinHandle<()>) {
    let socket = UdpSocket::bind((host, 0)).await.expect("bind a test host");
    let addr = socket.local_addr().expect("address");
    let task = tokio::spawn(async move {
        let mut datagram = [0u8; 512];
        while let Ok((_, from)) = socket.recv_from(&mut datagram).await {
            let _ = socket.send_to(b"answer\n", from).await;
        }
    });
    (format!("udp:{addr}"), task)
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
        if let (Some(ip), true) = (ip, real_nodes::is_pod_ready(Some(&pod))) {
            return ip;
        }
        assert!(started.elapsed() < START_BOUND, "{name} not ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The ClusterIP of Service `namespace/name`.
async fn cluster_ip(api: &ApiHarness, namespace: &str, name: &str) -> String {
    let services: Api<Service> = Api::namespaced(api.env.kube.clone(), namespace);
    let service = services.get(name).await.expect("the service");
    service.spec.and_then(|s| s.cluster_ip).expect("its ClusterIP")
}

/// The cluster's DNS as `up` runs it (`stack_tests::env::cluster_dns`): the address of one of
/// its Ready pods.
async fn dns_pod_ip(api: &ApiHarness) -> String {
    let pods: Api<Pod> = Api::namespaced(api.env.kube.clone(), cluster_dns::NAMESPACE);
    let (key, value) = cluster_dns::POD_LABEL;
    let listed = pods
        .list(&ListParams::default().labels(&format!("{key}={value}")))
        .await
        .expect("the DNS pods");
    listed
        .items
        .iter()
        .filter(|pod| real_nodes::is_pod_ready(Some(pod)))
        .find_map(|pod| pod.status.as_ref()?.pod_ip.clone())
        .expect("a Ready DNS pod (tests/env/up runs CoreDNS)")
}

/// A pod on a real node that the isolation does not select (in `kube-system`, not labelled as
/// the DNS is), which resolves `lookups` and probes `targets` itself, outside the isolation,
/// and tells on 8080.
async fn control_pod(api: &ApiHarness, targets: &str, lookups: &str) -> (Api<Pod>, String, String) {
    let pods: Api<Pod> = Api::namespaced(api.env.kube.clone(), "kube-system");
    let name = unique_name("control");
    let image = real_nodes::image(api.registry(), "tcp");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"role": real_nodes::STACK_ROLE},
            "restartPolicy": "Never",
            "activeDeadlineSeconds": 300,
            "automountServiceAccountToken": false,
            "containers": [{
                "name": "control",
                "image": image,
                "env": [{"name": "PROBES", "value": targets}, {"name": "LOOKUPS", "value": lookups}],
                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
            }],
        },
    }))
    .expect("control pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create the control pod");
    let ip = pod_ip(&pods, &name).await;
    (pods, name, ip)
}

#[tokio::test]
async fn a_stack_reaches_dns_and_the_internet_and_nothing_private_and_no_stack_reaches_it() {
    // Under runc and under gVisor: the Sentry's own network stack still sends through the pod's
    // veth, where the node's enforcer decides.
    futures::future::join(
        isolation_seen_from_a_stack(None, ("32720", "32723")),
        isolation_seen_from_a_stack(Some(real_nodes::GVISOR_RUNTIME_CLASS), ("32716", "32719")),
    )
    .await;
}

/// The isolation test's run with every stack under `runtime_class` (the nodes' default when
/// none), its stacks on host ports `ports`.
async fn isolation_seen_from_a_stack(runtime_class: Option<&str>, ports: (&str, &str)) {
    let mut vars = exposed_on("hostport", ports.0, ports.1).to_vec();
    vars.extend(runtime_class.map(|class| ("STACK_RUNTIME_CLASS", class)));
    let api = ApiHarness::on_real_nodes_with_tenants(&vars).await;
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
    let (vpc_udp, _vpc_udp_task) = udp_responder_on(&host).await;
    let (internet_udp, _internet_udp_task) = udp_responder_on(&internet_host).await;
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
    let dns_service = cluster_ip(&api, cluster_dns::NAMESPACE, cluster_dns::SERVICE).await;
    let dns_pod = dns_pod_ip(&api).await;
    let (dns, dns_through_service) = (format!("{dns_pod}:53"), format!("{dns_service}:53"));
    let dns_metrics = format!("{dns_pod}:{}", cluster_dns::METRICS_PORT);
    // The names a shell asks, and what the cluster's DNS must answer.
    let apiserver_service = cluster_ip(&api, "default", "kubernetes").await;
    let answers = BTreeMap::from([
        (
            format!("kubernetes.default.svc.{}", cluster_dns::CLUSTER_DOMAIN),
            vec![apiserver_service],
        ),
        (cluster_dns::INTERNET_NAME.to_owned(), vec![internet_host.clone()]),
    ]);
    let names = answers.keys().cloned().collect::<Vec<_>>().join(" ");
    let kubelets = kubelets(&api).await;
    let mut controls = vec![
        metadata.clone(),
        apiserver.clone(),
        vpc.to_string(),
        internet.to_string(),
        dns.clone(),
        dns_metrics.clone(),
        vpc_udp.clone(),
        internet_udp.clone(),
    ];
    controls.extend(kubelets.iter().cloned());
    let (control_pods, control_name, control_ip) = control_pod(&api, &controls.join(" "), &names).await;

    // Outside the isolation every target answers (the network carries them) and the names
    // resolve.
    let control = read_all_within(format!("{control_ip}:8080").parse().expect("addr"), PROBES_BOUND)
        .await
        .expect("the control pod");
    let seen = probes(&control);
    for target in &controls {
        assert_eq!(
            seen.get(target).map(String::as_str),
            Some("open"),
            "control {target}: {control}"
        );
    }
    assert_eq!(lookups(&control), answers, "control: {control}");

    // A participant's shell in a stack.
    let mut targets = vec![
        metadata.clone(),
        apiserver.clone(),
        vpc.to_string(),
        neighbour_pod.clone(),
        neighbour_public.to_string(),
        dns.clone(),
        dns_through_service.clone(),
        dns_metrics.clone(),
        internet.to_string(),
        vpc_udp.clone(),
        internet_udp.clone(),
    ];
    targets.extend(kubelets.iter().cloned());
    let shell = Challenge::local(&registry, "tcp")
        .with_env("PROBES", &targets.join(" "))
        .with_env("LOOKUPS", &names);
    let created = create_as(CTF_PLATFORM.key, shell.manifest()).await;
    assert_eq!(created.status, 201, "{}", created.json);
    let shell_id = created.json["stack_id"].as_str().expect("id").to_owned();
    let address = wait_running(&api, CTF_PLATFORM.key, &shell_id).await;
    // Its own port answers a participant from outside, and what the shell saw on this very
    // first connection is what holds from then on.
    let said = read_all_within(address, PROBES_BOUND)
        .await
        .expect("the stack's own port");
    assert!(said.contains(&shell.flag), "{said}");
    let seen = probes(&said);
    let mut expected = vec![
        (metadata.clone(), "closed"),
        (apiserver.clone(), "closed"),
        (vpc.to_string(), "closed"),
        (neighbour_pod.clone(), "closed"),
        (neighbour_public.to_string(), "closed"),
        (dns.clone(), "open"),
        (dns_through_service.clone(), "open"),
        (dns_metrics.clone(), "closed"),
        (internet.to_string(), "open"),
        // Over UDP as over TCP.
        (vpc_udp.clone(), "closed"),
        (internet_udp.clone(), "open"),
    ];
    // The node's own services, its own node's included.
    expected.extend(kubelets.iter().map(|kubelet| (kubelet.clone(), "closed")));
    let wrong: Vec<String> = expected
        .iter()
        .filter(|(target, state)| seen.get(target.as_str()).map(String::as_str) != Some(*state))
        .map(|(target, state)| format!("{target}: expected {state}, saw {:?}", seen.get(target.as_str())))
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}\n{said}");
    // The cluster's DNS answers it over UDP (busybox's nslookup), through the Service's
    // ClusterIP its resolv.conf names: the cluster's names and the internet host's.
    assert_eq!(lookups(&said), answers, "{said}");

    let _ = control_pods.delete(&control_name, &DeleteParams::default()).await;
    for id in [shell_id, neighbour_id] {
        api.call_as(ALL_OPERATOR.key, Method::DELETE, &format!("/stacks/{id}"), None)
            .await;
    }
    api.finish().await;
}

#[tokio::test]
async fn without_an_enforcer_a_stack_fails_isolation_not_enforced_instead_of_running_open() {
    use stack_tests::env::processes::Component;
    let api = ApiHarness::on_real_nodes_alone(&exposed_on("hostport", "32724", "32725")).await;
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
