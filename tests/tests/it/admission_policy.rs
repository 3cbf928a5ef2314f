//! The admission policies of `functions/kubernetes-rbac.yaml` on the real apiserver, met with
//! the functions' Kubernetes identity (group `stack-provisioner`, impersonated by the admin):
//! Pod Security `baseline` with host ports in the range, and the provisioner's forced settings.
//!
//! The namespace is labelled like a stack namespace but carries no Pod Security label, as with
//! `STACK_EXPOSURE=hostport`: every refusal below comes from the policy alone.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use stack_core::{Config, MANAGED_BY_LABEL, MANAGED_BY_VALUE, Protocol, StackId, TargetPort, validate};
use stack_tests::api::{ApiHarness, WEB_POD, kube_config};
use stack_tests::env::rbac_manifest::{self, HARDENING_POLICY_NAME, POLICY_NAME, RbacManifest};
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
        let roles = manifest.objects_in::<Role>(namespace.name()).expect("roles");
        let bindings = manifest
            .objects_in::<RoleBinding>(namespace.name())
            .expect("role bindings");
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
        let policy = self.config.validation.clone();
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

/// `value` without `pointer`.
fn without(mut value: Value, pointer: &str) -> Value {
    let (parent, key) = pointer.rsplit_once('/').expect("a pointer");
    if let Some(object) = value.pointer_mut(parent).and_then(Value::as_object_mut) {
        object.remove(key);
    }
    value
}

/// Asserts the apiserver refused with the baseline policy's `message`.
fn assert_refused_by_policy(case: &str, result: Result<Pod, kube::Error>, message: &str) {
    assert_refused_by_one_of(case, result, &[(POLICY_NAME, message)]);
}

/// Asserts the apiserver refused with one of `refusals`, each a policy and its message: the
/// apiserver names only the first refusal when a pod breaks both policies.
fn assert_refused_by_one_of(case: &str, result: Result<Pod, kube::Error>, refusals: &[(&str, &str)]) {
    match result {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{case}: {status:?}");
            assert!(
                refusals
                    .iter()
                    .any(|(policy, message)| status.message.contains(&format!(
                        "ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request: {message}"
                    ))),
                "{case}: expected one of {refusals:?}, got {:?}",
                status.message
            );
        }
        Err(other) => panic!("{case}: expected the policy's refusal, got {other}"),
        Ok(_) => panic!("{case}: admitted, expected one of {refusals:?}"),
    }
}

#[tokio::test]
async fn refuses_what_baseline_forbids_and_host_ports_outside_the_range() {
    let harness = PolicyHarness::start().await;
    let pod = harness.stack_pod();
    let (min, max) = (harness.config.nodeport_min, harness.config.nodeport_max);
    let host_port = |port: u16| with(pod.clone(), "/spec/containers/0/ports/0/hostPort", json!(port));
    let set = |pointer: &str, value: Value| with(pod.clone(), pointer, value);
    let range = format!("hostPort must be between {min} and {max}");
    let container_context = "/spec/containers/0/securityContext";
    let capabilities = format!("{container_context}/capabilities/add");
    let host_namespaces = "hostNetwork, hostPID and hostIPC must be false";
    let baseline_capabilities = "capabilities.add may only name capabilities of the baseline's default set";
    let init_with_host_port = json!([{"name": "init", "image": "busybox:1.36", "ports": [{"containerPort": 81, "hostPort": 80}],
        "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["NET_RAW"]}}}]);
    let cases = [
        ("host-port-below", host_port(min - 1), range.as_str()),
        ("host-port-above", host_port(max + 1), range.as_str()),
        (
            "init-host-port",
            set("/spec/initContainers", init_with_host_port),
            range.as_str(),
        ),
        (
            "host-ip",
            with(host_port(min), "/spec/containers/0/ports/0/hostIP", json!("0.0.0.0")),
            "hostIP is forbidden",
        ),
        ("host-network", set("/spec/hostNetwork", json!(true)), host_namespaces),
        ("host-pid", set("/spec/hostPID", json!(true)), host_namespaces),
        (
            "sys-admin",
            set(&capabilities, json!(["SYS_ADMIN"])),
            baseline_capabilities,
        ),
        ("net-raw", set(&capabilities, json!(["NET_RAW"])), baseline_capabilities),
        (
            "apparmor-unconfined",
            set(
                &format!("{container_context}/appArmorProfile"),
                json!({"type": "Unconfined"}),
            ),
            "the AppArmor profile must be RuntimeDefault or Localhost",
        ),
        (
            "selinux-user",
            set("/spec/securityContext/seLinuxOptions", json!({"user": "system_u"})),
            "seLinuxOptions may only set a container type, and no user or role",
        ),
        (
            "unsafe-sysctl",
            set(
                "/spec/securityContext/sysctls",
                json!([{"name": "kernel.msgmax", "value": "65536"}]),
            ),
            "only the baseline's safe sysctls are allowed",
        ),
        (
            "probe-host",
            set(
                "/spec/containers/0/livenessProbe",
                json!({"tcpSocket": {"host": "169.254.169.254", "port": 80}}),
            ),
            "probes and lifecycle hooks must not set a host",
        ),
    ];
    for (case, pod, message) in cases {
        assert_refused_by_policy(case, harness.create(case, pod).await, message);
    }
    // These break the forced settings too: either policy's refusal will do.
    let escalation = "every container's securityContext.allowPrivilegeEscalation must be false";
    let both = [
        (
            "privileged",
            // The apiserver refuses privileged without privilege escalation by itself.
            set(
                container_context,
                json!({"privileged": true, "allowPrivilegeEscalation": true, "capabilities": {"drop": ["NET_RAW"]}}),
            ),
            [
                (POLICY_NAME, "containers must not be privileged"),
                (HARDENING_POLICY_NAME, escalation),
            ],
        ),
        (
            "host-path",
            set("/spec/volumes", json!([{"name": "root", "hostPath": {"path": "/"}}])),
            [
                (POLICY_NAME, "hostPath volumes are forbidden"),
                (HARDENING_POLICY_NAME, VOLUME_TYPES),
            ],
        ),
        (
            "seccomp-unconfined",
            set("/spec/securityContext/seccompProfile/type", json!("Unconfined")),
            [
                (POLICY_NAME, "seccompProfile must be RuntimeDefault or Localhost"),
                (HARDENING_POLICY_NAME, POD_SECCOMP),
            ],
        ),
    ];
    for (case, pod, refusals) in both {
        assert_refused_by_one_of(case, harness.create(case, pod).await, &refusals);
    }
    harness.finish().await;
}

const VOLUME_TYPES: &str = "only emptyDir, configMap, secret, downwardAPI and projected volumes are allowed";
const POD_SECCOMP: &str = "spec.securityContext.seccompProfile.type must be RuntimeDefault";

/// Each forced setting in turn, on the pod the provisioner makes: every one-field change that
/// undoes it is refused, with a message naming the setting, whoever creates the pod (here the
/// functions' own identity). None of these changes breaks Pod Security `baseline`.
#[tokio::test]
async fn refuses_each_setting_the_provisioner_forces() {
    let harness = PolicyHarness::start().await;
    // Another service account must exist, or the apiserver refuses the pod before the policy.
    let accounts: kube::Api<ServiceAccount> = harness.namespace.api();
    let account: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "other"}})).expect("account");
    accounts
        .create(&PostParams::default(), &account)
        .await
        .expect("service account");
    let pod = harness.stack_pod();
    let container = "/spec/containers/0/securityContext";
    let hardened_init = json!({"name": "init", "image": "busybox:1.36",
        "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["NET_RAW"]}}});
    let label = "metadata.labels must have app.kubernetes.io/managed-by=stack-provisioner";
    let restart = "spec.restartPolicy must be Never";
    let token = "spec.automountServiceAccountToken must be false";
    let container_seccomp = "a container's securityContext.seccompProfile.type may only be RuntimeDefault";
    let escalation = "every container's securityContext.allowPrivilegeEscalation must be false";
    let net_raw = "every container's securityContext.capabilities.drop must name NET_RAW or ALL";
    let projected = "projected volumes may only project configMap, secret and downwardAPI sources";
    let localhost = json!({"type": "Localhost", "localhostProfile": "profiles/audit.json"});
    // The stack pod with one field set or removed, or with one init container or one volume.
    let set = |pointer: &str, value: Value| with(pod.clone(), pointer, value);
    let unset = |pointer: &str| without(pod.clone(), pointer);
    let init = |container: Value| set("/spec/initContainers", json!([container]));
    let volume = |volume: Value| set("/spec/volumes", json!([volume]));
    let cases = [
        ("no-labels", unset("/metadata/labels"), label),
        (
            "other-manager",
            set("/metadata/labels", json!({"app.kubernetes.io/managed-by": "helm"})),
            label,
        ),
        ("restart-always", set("/spec/restartPolicy", json!("Always")), restart),
        ("restart-unset", unset("/spec/restartPolicy"), restart),
        (
            "no-deadline",
            unset("/spec/activeDeadlineSeconds"),
            "spec.activeDeadlineSeconds must be set",
        ),
        ("token", set("/spec/automountServiceAccountToken", json!(true)), token),
        ("token-unset", unset("/spec/automountServiceAccountToken"), token),
        (
            "service-account",
            set("/spec/serviceAccountName", json!("other")),
            "spec.serviceAccountName must be default",
        ),
        (
            "service-links",
            set("/spec/enableServiceLinks", json!(true)),
            "spec.enableServiceLinks must be false",
        ),
        ("pod-seccomp-unset", unset("/spec/securityContext"), POD_SECCOMP),
        (
            // Pod Security baseline admits a Localhost profile; the provisioner never sets one.
            "pod-seccomp-localhost",
            set("/spec/securityContext/seccompProfile", localhost.clone()),
            POD_SECCOMP,
        ),
        (
            "container-seccomp-localhost",
            set(&format!("{container}/seccompProfile"), localhost),
            container_seccomp,
        ),
        (
            "escalation",
            set(&format!("{container}/allowPrivilegeEscalation"), json!(true)),
            escalation,
        ),
        (
            "escalation-unset",
            unset(&format!("{container}/allowPrivilegeEscalation")),
            escalation,
        ),
        (
            "init-escalation",
            init(without(
                hardened_init.clone(),
                "/securityContext/allowPrivilegeEscalation",
            )),
            escalation,
        ),
        (
            "net-raw-kept",
            set(&format!("{container}/capabilities/drop"), json!(["CHOWN"])),
            net_raw,
        ),
        (
            "init-net-raw-kept",
            init(without(hardened_init, "/securityContext/capabilities")),
            net_raw,
        ),
        (
            "claim",
            volume(json!({"name": "data", "persistentVolumeClaim": {"claimName": "data"}})),
            VOLUME_TYPES,
        ),
        (
            "csi",
            volume(json!({"name": "data", "csi": {"driver": "csi.example.com"}})),
            VOLUME_TYPES,
        ),
        (
            "huge-pages",
            volume(json!({"name": "data", "emptyDir": {"medium": "HugePages"}})),
            "an emptyDir's medium must be Memory or unset",
        ),
        (
            "projected-token",
            volume(json!({"name": "api", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}})),
            projected,
        ),
    ];
    for (case, pod, message) in cases {
        assert_refused_by_one_of(
            case,
            harness.create(case, pod).await,
            &[(HARDENING_POLICY_NAME, message)],
        );
    }
    harness.finish().await;
}

#[tokio::test]
async fn admits_stack_pods_and_host_ports_inside_the_range() {
    let harness = PolicyHarness::start().await;
    let pod = harness.stack_pod();
    let (min, max) = (harness.config.nodeport_min, harness.config.nodeport_max);
    // The stack pod with `edits` made, each a JSON pointer and the value set there.
    let edited = |edits: &[(&str, Value)]| {
        let edit = |pod, (pointer, value): &(&str, Value)| with(pod, pointer, value.clone());
        edits.iter().fold(pod.clone(), edit)
    };
    let host_port = "/spec/containers/0/ports/0/hostPort";
    let container = "/spec/containers/0/securityContext";
    let cases = [
        ("as-provisioned", pod.clone()),
        ("host-port-min", edited(&[(host_port, json!(min))])),
        ("host-port-max", edited(&[(host_port, json!(max))])),
        (
            "baseline-extras",
            edited(&[
                (host_port, json!(min + 1)),
                (
                    &format!("{container}/capabilities/add"),
                    json!(["NET_BIND_SERVICE", "CHOWN"]),
                ),
                (
                    "/spec/securityContext/sysctls",
                    json!([{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}]),
                ),
            ]),
        ),
        // What a manifest may add to the forced settings: tighter, never looser.
        (
            "tighter",
            edited(&[
                (&format!("{container}/runAsNonRoot"), json!(true)),
                (&format!("{container}/runAsUser"), json!(1000)),
                (&format!("{container}/readOnlyRootFilesystem"), json!(true)),
            ]),
        ),
        (
            "drop-all",
            edited(&[
                (&format!("{container}/capabilities/drop"), json!(["ALL"])),
                (&format!("{container}/capabilities/add"), json!(["NET_BIND_SERVICE"])),
            ]),
        ),
        (
            "volumes",
            edited(&[(
                "/spec/volumes",
                json!([
                    {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
                    {"name": "config", "configMap": {"name": "challenge"}},
                    {"name": "flag", "secret": {"secretName": "flag"}},
                    {"name": "info", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
                    {"name": "both", "projected": {"sources": [{"configMap": {"name": "challenge"}}, {"secret": {"name": "flag"}}]}},
                ]),
            )]),
        ),
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
    api.create_web().await;
    let mut pod = api.managed_pods().await.pop().expect("the stack's pod");
    // Its labels stay (the hardening policy wants the managed-by one): the hostIP is the one fault.
    pod.metadata = kube::api::ObjectMeta {
        name: Some("host-ip".to_owned()),
        labels: pod.metadata.labels.clone(),
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

/// A container added to a running stack's pod (`kubectl debug`) is held to the same settings:
/// refused bare, admitted as `kubectl debug --profile=restricted` makes it.
#[tokio::test]
async fn an_ephemeral_container_is_hardened_too() {
    let harness = PolicyHarness::start().await;
    let created = harness
        .create("debugged", harness.stack_pod())
        .await
        .expect("the stack pod is admitted");
    // The functions may not add one (no right on the subresource): an admin does.
    let admin: kube::Api<Pod> = harness.namespace.api();
    let add = |container: Value| {
        json!({"spec": {"ephemeralContainers": [
            with(container, "/name", json!("debugger"))
        ]}})
    };
    let bare = add(json!({"image": "busybox:1.36"}));
    let refused = admin
        .patch_ephemeral_containers(&created.name_any(), &PatchParams::default(), &Patch::Strategic(&bare))
        .await;
    assert_refused_by_one_of(
        "bare-debugger",
        refused,
        &[(
            HARDENING_POLICY_NAME,
            "every container's securityContext.allowPrivilegeEscalation must be false",
        )],
    );
    let restricted = add(json!({"image": "busybox:1.36", "securityContext": {
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": true,
        "seccompProfile": {"type": "RuntimeDefault"},
    }}));
    admin
        .patch_ephemeral_containers(
            &created.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(&restricted),
        )
        .await
        .expect("a restricted debugger is admitted");
    harness.finish().await;
}
