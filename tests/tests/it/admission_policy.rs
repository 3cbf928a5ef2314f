//! The admission policy of `functions/kubernetes-rbac.yaml` on the real apiserver, met with the
//! functions' Kubernetes identity (group `stack-provisioner`, impersonated by the admin).
//!
//! The namespace is labelled like a stack namespace but carries no Pod Security label, as with
//! `STACK_EXPOSURE=hostport`: every refusal below comes from the policy alone.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::{Value, json};
use stack_core::config::Config;
use stack_core::model::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, Protocol, StackId, TargetPort};
use stack_core::validate::{ValidationPolicy, validate};
use stack_tests::api::{ApiHarness, WEB_POD, kube_config};
use stack_tests::env::rbac_manifest::{self, POLICY_NAME, RbacManifest};
use stack_tests::env::{SIMULATED_ROLE, TestEnv, TestNamespace};

/// The functions' identity: any user in the group the manifest binds.
const FUNCTIONS_USER: &str = "stack-provisioner-fn";
const FUNCTIONS_GROUP: &str = "stack-provisioner";

struct PolicyHarness {
    namespace: TestNamespace,
    /// Pods of the namespace, as the functions' identity.
    pods: Api<Pod>,
    config: Config,
}

impl PolicyHarness {
    /// A namespace with the manifest's Role and RoleBinding, and the manifest's policy applied.
    async fn start() -> Self {
        let env = TestEnv::connect().await.expect("local environment (run tests/env/up)");
        // The policy as the file has it now, whatever `up` applied earlier.
        rbac_manifest::apply_admission_policy(&env.kube)
            .await
            .expect("apply the admission policy");
        let labels = BTreeMap::from([(MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned())]);
        let namespace = TestNamespace::create_with_labels(&env.kube, "policy", labels)
            .await
            .expect("namespace");
        let manifest = RbacManifest::load_for_namespace(namespace.name()).expect("rbac manifest");
        let roles = manifest.objects::<Role>().expect("roles");
        let bindings = manifest.objects::<RoleBinding>().expect("role bindings");
        assert!(
            !roles.is_empty() && !bindings.is_empty(),
            "the manifest has a Role and a RoleBinding"
        );
        rbac_manifest::apply(&namespace.api(), &roles)
            .await
            .expect("apply Role");
        rbac_manifest::apply(&namespace.api(), &bindings)
            .await
            .expect("apply RoleBinding");

        let mut functions = kube_config(&env).await;
        functions.auth_info.impersonate = Some(FUNCTIONS_USER.to_owned());
        functions.auth_info.impersonate_groups = Some(vec![FUNCTIONS_GROUP.to_owned()]);
        let client = Client::try_from(functions).expect("impersonating client");
        let pods = Api::namespaced(client, namespace.name());

        // The pods it admits land on the simulated nodes: nothing pulls their images.
        let vars = BTreeMap::from([
            ("STACK_NAMESPACE", namespace.name()),
            ("API_KEY", "k"),
            ("STACK_NODE_ROLE", SIMULATED_ROLE),
        ]);
        let config = Config::from_lookup(|name| vars.get(name).map(|v| (*v).to_owned())).expect("config");
        Self {
            namespace,
            pods,
            config,
        }
    }

    /// What the provisioner creates from [`WEB_POD`] (exposing TCP 80), as JSON.
    fn stack_pod(&self) -> Value {
        let policy = ValidationPolicy::from_config(&self.config).expect("validation policy");
        let port = TargetPort {
            container_port: 80,
            protocol: Protocol::Tcp,
        };
        let hardened = validate(WEB_POD, &[port], &StackId::generate(), &policy).expect("WEB_POD is valid");
        serde_json::to_value(hardened.pod).expect("pod as JSON")
    }

    async fn create(&self, name: &str, pod: Value) -> Result<Pod, kube::Error> {
        let mut pod: Pod = serde_json::from_value(pod).expect("a Pod");
        pod.metadata.name = Some(name.to_owned());
        self.pods.create(&PostParams::default(), &pod).await
    }

    async fn finish(self) {
        self.namespace.delete().await.expect("delete namespace");
    }
}

/// `value` with `pointer` set to `new`, creating the objects on the way.
fn with(mut value: Value, pointer: &str, new: Value) -> Value {
    let mut at = &mut value;
    for token in pointer.trim_start_matches('/').split('/') {
        at = match at {
            Value::Array(items) => &mut items[token.parse::<usize>().expect("array index")],
            other => {
                if !other.is_object() {
                    *other = json!({});
                }
                other
                    .as_object_mut()
                    .expect("object")
                    .entry(token)
                    .or_insert(Value::Null)
            }
        };
    }
    *at = new;
    value
}

/// Asserts the apiserver refused with the policy's `message`.
fn assert_refused_by_policy(case: &str, result: Result<Pod, kube::Error>, message: &str) {
    match result {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{case}: {status:?}");
            assert!(
                status.message.contains(&format!(
                    "ValidatingAdmissionPolicy '{POLICY_NAME}' with binding '{POLICY_NAME}' denied request"
                )) && status.message.contains(message),
                "{case}: expected the policy's {message:?}, got {:?}",
                status.message
            );
        }
        Err(other) => panic!("{case}: expected the policy's refusal, got {other}"),
        Ok(_) => panic!("{case}: admitted, expected the policy's {message:?}"),
    }
}

#[tokio::test]
async fn refuses_what_baseline_forbids_and_host_ports_outside_the_range() {
    let harness = PolicyHarness::start().await;
    let pod = harness.stack_pod();
    let (min, max) = (harness.config.nodeport_min, harness.config.nodeport_max);
    let host_port = |port: u16| with(pod.clone(), "/spec/containers/0/ports/0/hostPort", json!(port));
    let range = format!("hostPort must be between {min} and {max}");
    let container_context = "/spec/containers/0/securityContext";
    let cases = [
        ("host-port-below", host_port(min - 1), range.as_str()),
        ("host-port-above", host_port(max + 1), range.as_str()),
        (
            "init-host-port",
            with(
                pod.clone(),
                "/spec/initContainers",
                json!([{"name": "init", "image": "busybox:1.36", "ports": [{"containerPort": 81, "hostPort": 80}]}]),
            ),
            range.as_str(),
        ),
        (
            "host-ip",
            with(host_port(min), "/spec/containers/0/ports/0/hostIP", json!("0.0.0.0")),
            "hostIP is forbidden",
        ),
        (
            "host-network",
            with(pod.clone(), "/spec/hostNetwork", json!(true)),
            "hostNetwork, hostPID and hostIPC must be false",
        ),
        (
            "host-pid",
            with(pod.clone(), "/spec/hostPID", json!(true)),
            "hostNetwork, hostPID and hostIPC must be false",
        ),
        (
            "privileged",
            // The apiserver refuses privileged without privilege escalation by itself.
            with(
                pod.clone(),
                container_context,
                json!({"privileged": true, "allowPrivilegeEscalation": true}),
            ),
            "containers must not be privileged",
        ),
        (
            "host-path",
            with(
                pod.clone(),
                "/spec/volumes",
                json!([{"name": "root", "hostPath": {"path": "/"}}]),
            ),
            "hostPath volumes are forbidden",
        ),
        (
            "sys-admin",
            with(
                pod.clone(),
                &format!("{container_context}/capabilities/add"),
                json!(["SYS_ADMIN"]),
            ),
            "capabilities.add may only name capabilities of the baseline's default set",
        ),
        (
            "net-raw",
            with(
                pod.clone(),
                &format!("{container_context}/capabilities/add"),
                json!(["NET_RAW"]),
            ),
            "capabilities.add may only name capabilities of the baseline's default set",
        ),
        (
            "seccomp-unconfined",
            with(
                pod.clone(),
                "/spec/securityContext/seccompProfile/type",
                json!("Unconfined"),
            ),
            "seccompProfile must be RuntimeDefault or Localhost",
        ),
        (
            "apparmor-unconfined",
            with(
                pod.clone(),
                &format!("{container_context}/appArmorProfile"),
                json!({"type": "Unconfined"}),
            ),
            "the AppArmor profile must be RuntimeDefault or Localhost",
        ),
        (
            "selinux-user",
            with(
                pod.clone(),
                "/spec/securityContext/seLinuxOptions",
                json!({"user": "system_u"}),
            ),
            "seLinuxOptions may only set a container type, and no user or role",
        ),
        (
            "unsafe-sysctl",
            with(
                pod.clone(),
                "/spec/securityContext/sysctls",
                json!([{"name": "kernel.msgmax", "value": "65536"}]),
            ),
            "only the baseline's safe sysctls are allowed",
        ),
        (
            "probe-host",
            with(
                pod.clone(),
                "/spec/containers/0/livenessProbe",
                json!({"tcpSocket": {"host": "169.254.169.254", "port": 80}}),
            ),
            "probes and lifecycle hooks must not set a host",
        ),
    ];
    for (case, pod, message) in cases {
        assert_refused_by_policy(case, harness.create(case, pod).await, message);
    }
    harness.finish().await;
}

#[tokio::test]
async fn admits_stack_pods_and_host_ports_inside_the_range() {
    let harness = PolicyHarness::start().await;
    let pod = harness.stack_pod();
    let (min, max) = (harness.config.nodeport_min, harness.config.nodeport_max);
    let host_port = |port: u16| with(pod.clone(), "/spec/containers/0/ports/0/hostPort", json!(port));
    let baseline_extras = with(
        with(
            host_port(min + 1),
            "/spec/containers/0/securityContext/capabilities/add",
            json!(["NET_BIND_SERVICE", "CHOWN"]),
        ),
        "/spec/securityContext/sysctls",
        json!([{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}]),
    );
    let cases = [
        ("as-provisioned", pod.clone()),
        ("host-port-min", host_port(min)),
        ("host-port-max", host_port(max)),
        ("baseline-extras", baseline_extras),
    ];
    for (case, pod) in cases {
        let created = harness
            .create(case, pod)
            .await
            .unwrap_or_else(|e| panic!("{case}: refused: {e}"));
        assert!(created.metadata.uid.is_some(), "{case}: created");
    }
    harness.finish().await;
}

/// The namespace the API creates on first use (Pod Security `baseline` enforced, as in
/// NodePort mode) is covered too: the policy refuses a hostIP, which Pod Security lets pass.
#[tokio::test]
async fn covers_the_namespace_the_provisioner_creates() {
    let api = ApiHarness::start().await;
    let created = api.create(WEB_POD, json!(80)).await;
    assert_eq!(created.status, 201, "{}", created.json);
    let mut pod = api.managed_pods().await.pop().expect("the stack's pod");
    pod.metadata = kube::api::ObjectMeta {
        name: Some("host-ip".to_owned()),
        ..kube::api::ObjectMeta::default()
    };
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = None;
        spec.containers[0].ports.as_mut().expect("ports")[0].host_ip = Some("0.0.0.0".to_owned());
    }
    pod.status = None;
    let refused = api.pods_api().create(&PostParams::default(), &pod).await;
    assert_refused_by_policy("host-ip", refused, "hostIP is forbidden");
    api.finish().await;
}
