//! The functions' Kubernetes rights (`functions/kubernetes-rbac.yaml`'s Role and ClusterRole,
//! for group `stack-provisioner`) on the real apiserver: the API and the reconciler do all
//! they do under them, in both exposure modes, and the verbs they do not grant are refused.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use http::Method;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use stack_core::{Reconciler, StackId, run_pass};
use stack_tests::api::{ApiHarness, kube_config};
use stack_tests::env::rbac_manifest::{self, RbacManifest};
use stack_tests::env::{TestEnv, TestNamespace};
use stack_tests::reconciler::{PASS_BUDGET, reconciler_config, set_ttl, stacks_over};

const FUNCTIONS_USER: &str = "stack-provisioner-fn";
const FUNCTIONS_GROUP: &str = "stack-provisioner";

/// A stack namespace set up as the manifest sets up `stacks`, and a client config with the
/// functions' identity.
struct Granted {
    env: TestEnv,
    namespace: String,
    /// The manifest's ClusterRole and binding, renamed for this test: they are cluster-wide
    /// and the ClusterRole names the namespace.
    cluster_name: String,
    functions: kube::Config,
}

impl Granted {
    /// The manifest's Namespace labels (as its header says for hostport: `privileged`, without
    /// the two lines after it), Role, RoleBinding, ClusterRole and binding, applied as admin.
    async fn grant(hostport: bool) -> Self {
        let env = TestEnv::connect().await.expect("local environment (run tests/env/up)");
        let template = RbacManifest::load().expect("rbac manifest");
        let mut labels = template
            .objects::<Namespace>()
            .expect("namespace")
            .into_iter()
            .find(|n| n.metadata.name.as_deref() == Some(rbac_manifest::DEFAULT_NAMESPACE))
            .expect("the manifest's stack Namespace")
            .metadata
            .labels
            .unwrap_or_default();
        if hostport {
            labels.insert("pod-security.kubernetes.io/enforce".to_owned(), "privileged".to_owned());
            labels.remove("pod-security.kubernetes.io/enforce-version");
            labels.remove("pod-security.kubernetes.io/warn");
        }
        let namespace = TestNamespace::create_with_labels(&env.kube, "rbac", labels)
            .await
            .expect("namespace");
        let name = namespace.name().to_owned();
        let manifest = RbacManifest::load_for_namespace(&name).expect("rbac manifest");
        let roles = manifest.objects_in::<Role>(&name).expect("roles");
        rbac_manifest::apply(&namespace.api(), &roles)
            .await
            .expect("apply Role");
        let bindings = manifest.objects_in::<RoleBinding>(&name).expect("role bindings");
        rbac_manifest::apply(&namespace.api(), &bindings)
            .await
            .expect("apply RoleBinding");
        let cluster_name = format!("stack-provisioner-{name}");
        let mut roles = manifest.objects::<ClusterRole>().expect("cluster roles");
        for role in &mut roles {
            role.metadata.name = Some(cluster_name.clone());
        }
        let mut bindings = manifest.objects::<ClusterRoleBinding>().expect("cluster role bindings");
        for binding in &mut bindings {
            binding.metadata.name = Some(cluster_name.clone());
            binding.role_ref.name = cluster_name.clone();
        }
        assert_eq!((roles.len(), bindings.len()), (1, 1), "one ClusterRole and its binding");
        rbac_manifest::apply(&Api::all(env.kube.clone()), &roles)
            .await
            .expect("apply ClusterRole");
        rbac_manifest::apply(&Api::all(env.kube.clone()), &bindings)
            .await
            .expect("apply ClusterRoleBinding");

        let mut functions = kube_config(&env).await;
        functions.auth_info.impersonate = Some(FUNCTIONS_USER.to_owned());
        functions.auth_info.impersonate_groups = Some(vec![FUNCTIONS_GROUP.to_owned()]);
        Self {
            env,
            namespace: name,
            cluster_name,
            functions,
        }
    }

    fn client(&self) -> Client {
        Client::try_from(self.functions.clone()).expect("impersonating client")
    }

    /// The API over this namespace with the functions' identity.
    async fn api(&self, overrides: &[(&str, &str)]) -> ApiHarness {
        let mut vars = vec![
            ("STACK_NAMESPACE", self.namespace.as_str()),
            ("STACK_REQUIRE_ISOLATION", "true"),
        ];
        vars.extend_from_slice(overrides);
        let env = TestEnv::connect().await.expect("local environment");
        ApiHarness::with_kube(env, self.functions.clone(), &vars).await
    }

    /// Whether the functions may `verb` `resource` (in the namespace unless `cluster`).
    async fn may(&self, verb: &str, group: &str, resource: &str, cluster: bool) -> bool {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.to_owned()),
                    group: Some(group.to_owned()),
                    resource: Some(resource.to_owned()),
                    namespace: (!cluster).then(|| self.namespace.clone()),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        let answer = Api::<SelfSubjectAccessReview>::all(self.client())
            .create(&PostParams::default(), &review)
            .await
            .expect("access review");
        answer.status.expect("review status").allowed
    }

    async fn revoke(self) {
        let delete = DeleteParams::default();
        Api::<ClusterRoleBinding>::all(self.env.kube.clone())
            .delete(&self.cluster_name, &delete)
            .await
            .expect("delete ClusterRoleBinding");
        Api::<ClusterRole>::all(self.env.kube.clone())
            .delete(&self.cluster_name, &delete)
            .await
            .expect("delete ClusterRole");
    }
}

/// Every route that touches the cluster, then a reconcile pass that ends an expired stack,
/// all with the functions' identity under the manifest's grants for NodePort stacks (or, with
/// `hostport`, for host-port stacks): a missing right would be a 500 or a failed pass.
async fn run_the_product(hostport: bool) {
    let granted = Granted::grant(hostport).await;
    let exposure: &[(&str, &str)] = if hostport {
        &[("STACK_EXPOSURE", "hostport")]
    } else {
        &[]
    };
    let api = granted.api(exposure).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let created = api.create_web().await;
        ids.push(created.json["stack_id"].as_str().expect("stack_id").to_owned());
    }
    for path in [
        format!("/stacks/{}", ids[0]),
        format!("/stacks/{}/status", ids[0]),
        "/stacks".to_owned(),
        "/stats".to_owned(),
        "/healthz".to_owned(),
    ] {
        let read = api.call(Method::GET, &path, None).await;
        assert_eq!(read.status, 200, "{path}: {}", read.json);
    }
    let renewed = api.call(Method::POST, &format!("/stacks/{}/renew", ids[0]), None).await;
    assert_eq!(renewed.status, 200, "{}", renewed.json);
    api.delete_stack(&ids[0]).await;
    let batch = api
        .call(
            Method::POST,
            "/stacks/batch-delete",
            Some(json!({"stack_ids": [ids[1].clone()]})),
        )
        .await;
    assert_eq!(batch.status, 202, "{}", batch.json);

    let job = format!(
        "/stacks/batch-delete/{}",
        batch.json["job_id"].as_str().expect("job_id")
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let read = api.call(Method::GET, &job, None).await;
        assert_eq!(read.status, 200, "{}", read.json);
        if read.json["status"] == "completed" || read.json["status"] == "failed" {
            assert_eq!(
                (&read.json["status"], &read.json["deleted"]),
                (&json!("completed"), &json!(1)),
                "{}",
                read.json
            );
            break;
        }
        assert!(Instant::now() < deadline, "batch job still {}", read.json);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The reconciler, a sandbox of its own with the same identity, ends the expired one.
    let expired: StackId = ids[2].parse().expect("stack id");
    let stacks = stacks_over(
        reconciler_config(&granted.namespace, api.table.name(), &[]),
        stack_core::client_builder(&granted.functions)
            .expect("kube client")
            .build(),
        api.env.dynamodb.clone(),
    );
    set_ttl(
        stacks.store(),
        &expired,
        Timestamp::now() - SignedDuration::from_secs(1),
    )
    .await
    .expect("expire the stack");
    let summary = run_pass(&Reconciler::new(stacks), Instant::now() + PASS_BUDGET)
        .await
        .expect("the pass runs");
    assert_eq!((summary.counts.expired, summary.counts.failures), (1, 0), "{summary:?}");
    api.finish_asserting_nothing_left().await;
    granted.revoke().await;
}

#[tokio::test]
async fn the_api_and_the_reconciler_need_no_more_than_the_manifest_grants() {
    run_the_product(false).await;
}

#[tokio::test]
async fn so_do_host_port_stacks() {
    run_the_product(true).await;
}

/// The rights on one resource, as a Role's rules are written: (group, resource, cluster-wide,
/// the verbs the functions need, some they never use).
type Rule = (
    &'static str,
    &'static str,
    bool,
    &'static [&'static str],
    &'static [&'static str],
);

/// The verbs the functions never call are not granted: a stack's pod cannot be changed with
/// their credentials, nor a namespace created.
#[tokio::test]
async fn verbs_the_functions_never_use_are_refused() {
    let granted = Granted::grant(false).await;
    let api = granted.api(&[]).await;
    api.create_web().await;
    let pod = api.managed_pods().await.pop().expect("the stack's pod");

    let pods: Api<Pod> = Api::namespaced(granted.client(), &granted.namespace);
    let relabel = json!({"metadata": {"labels": {"app.kubernetes.io/managed-by": "nobody"}}});
    match pods
        .patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&relabel))
        .await
    {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("patch pod: expected 403, got {other:?}"),
    }

    let core = "";
    #[rustfmt::skip]
    let rules: &[Rule] = &[
        (core, "pods", false, &["create", "get", "list", "watch", "delete"], &["patch", "update", "deletecollection"]),
        (core, "pods/exec", false, &[], &["create"]),
        (core, "pods/ephemeralcontainers", false, &[], &["create"]),
        (core, "services", false, &["create", "get", "list", "delete"], &["patch", "watch"]),
        // List: every Service's node ports, closed to stacks.
        (core, "services", true, &["list"], &["get", "create", "delete", "watch"]),
        ("networking.k8s.io", "networkpolicies", false, &["list", "create", "patch"], &["get", "delete"]),
        (core, "resourcequotas", false, &[], &["get"]),
        (core, "limitranges", false, &[], &["list"]),
        (core, "secrets", false, &[], &["get"]),
        (core, "serviceaccounts", false, &[], &["create"]),
        // Patch: the startup taint's removal.
        (core, "nodes", true, &["get", "list", "patch"], &["watch"]),
        (core, "namespaces", true, &[], &["create", "patch"]),
        // Get: the overhead of STACK_RUNTIME_CLASS, counted in every stack's reservation.
        ("node.k8s.io", "runtimeclasses", true, &["get"], &["list", "create"]),
    ];
    let mut wrong = BTreeMap::new();
    for &(group, resource, cluster, needed, never_used) in rules {
        for verb in needed {
            if !granted.may(verb, group, resource, cluster).await {
                wrong.insert(format!("{verb} {resource}"), "refused, needed");
            }
        }
        for verb in never_used {
            if granted.may(verb, group, resource, cluster).await {
                wrong.insert(format!("{verb} {resource}"), "granted, never used");
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:?}");
    api.finish().await;
    granted.revoke().await;
}
