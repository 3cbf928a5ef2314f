//! The cluster's DNS, as EKS's CoreDNS add-on runs it: CoreDNS (`tests/env/go/coredns`, built by
//! `tests/env/install`, image `stack-env/coredns:1`) in `kube-system` on the real nodes, its
//! pods labelled `k8s-app: kube-dns` (what the stacks' isolation lets them reach on port 53),
//! behind the `kube-dns` Service at the ClusterIP the kubelets write into every pod's
//! resolv.conf (`clusterDNS` in `tests/env/nodes.sh`).
//!
//! The Corefile is EKS's default but for its `forward` to the VPC's resolver: nothing here may
//! reach beyond this machine, so a `hosts` block answers the one name beyond the cluster, the
//! internet host's ([`INTERNET_NAME`]), and no other name outside the cluster resolves.

use std::time::Duration;

use http::Uri;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::EnvError;
use super::real_nodes::{REAL_NODE_LABEL, image};
use super::wait::wait_for;

/// Where the DNS runs, as on EKS.
pub const NAMESPACE: &str = "kube-system";
/// The Service's name on EKS and upstream.
pub const SERVICE: &str = "kube-dns";
/// The DNS pods' label on EKS and upstream, which the isolation policy names.
pub const POD_LABEL: (&str, &str) = ("k8s-app", "kube-dns");
/// The kubelets' `clusterDomain`.
pub const CLUSTER_DOMAIN: &str = "cluster.local";
/// The name the DNS gives the internet host (`.test` is reserved for tests: RFC 6761).
pub const INTERNET_NAME: &str = "internet.test";
/// CoreDNS's Prometheus port: a port of the DNS pods that is not DNS.
pub const METRICS_PORT: u16 = 9153;

const NAME: &str = "coredns";
const FIELD_MANAGER: &str = "stack-env";
/// EKS's add-on runs two, spread over the nodes when it can.
const REPLICAS: i32 = 2;
/// The image's pull, CoreDNS's start and its first list of the cluster's services.
const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// EKS's default Corefile with a `hosts` block where EKS forwards to the VPC's resolver. It
/// falls through: CoreDNS runs `hosts` before `kubernetes`, and it would otherwise answer the
/// cluster's names too (SERVFAIL: not in its table).
pub fn corefile(internet_host: &str) -> String {
    format!(
        ".:53 {{
    errors
    health {{
        lameduck 5s
    }}
    ready
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }}
    hosts {{
        {internet_host} {INTERNET_NAME}
        fallthrough
    }}
    prometheus :{METRICS_PORT}
    cache 30
    reload
    loadbalance
}}
"
    )
}

/// Applies CoreDNS (its service account and `system:coredns` role, the Corefile, the
/// Deployment and the `kube-dns` Service at `service_ip`) and waits until every replica is
/// Ready, which CoreDNS's `ready` plugin is once it has listed the cluster's services.
pub async fn apply(
    client: &Client,
    apiserver: &Uri,
    registry: &str,
    internet_host: &str,
    service_ip: &str,
) -> Result<Deployment, EnvError> {
    apply_json(
        &Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE),
        NAME,
        json!({"metadata": {"name": NAME}}),
    )
    .await?;
    // The ClusterRole kubeadm and EKS's add-on give CoreDNS: what its kubernetes plugin watches.
    let role = format!("system:{NAME}");
    apply_json(
        &Api::<ClusterRole>::all(client.clone()),
        &role,
        json!({
            "metadata": {"name": role, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
            "rules": [
                {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"]},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
            ],
        }),
    )
    .await?;
    apply_json(
        &Api::<ClusterRoleBinding>::all(client.clone()),
        &role,
        json!({
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
        }),
    )
    .await?;
    apply_json(
        &Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE),
        NAME,
        json!({"metadata": {"name": NAME}, "data": {"Corefile": corefile(internet_host)}}),
    )
    .await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    apply_json(&deployments, NAME, deployment(apiserver, registry)?).await?;
    apply_json(
        &Api::<Service>::namespaced(client.clone(), NAMESPACE),
        SERVICE,
        json!({
            "metadata": {"name": SERVICE, "labels": {POD_LABEL.0: POD_LABEL.1, "kubernetes.io/name": "CoreDNS"}},
            "spec": {
                "clusterIP": service_ip,
                "selector": {POD_LABEL.0: POD_LABEL.1},
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                    {"name": "metrics", "port": METRICS_PORT, "protocol": "TCP", "targetPort": METRICS_PORT},
                ],
            },
        }),
    )
    .await?;
    let ready = |d: Option<&Deployment>| {
        d.and_then(|d| d.status.as_ref())
            .is_some_and(|s| s.ready_replicas.unwrap_or(0) >= REPLICAS && s.updated_replicas.unwrap_or(0) >= REPLICAS)
    };
    wait_for(&deployments, NAME, "CoreDNS's pods to be Ready", READY_TIMEOUT, ready)
        .await?
        .ok_or_else(|| EnvError::NotConfigured(format!("deployment {NAMESPACE}/{NAME} vanished")))
}

/// Upstream's and EKS's CoreDNS Deployment, on the real nodes, with its Prometheus, health and
/// readiness ports.
fn deployment(apiserver: &Uri, registry: &str) -> Result<Value, EnvError> {
    let host = apiserver
        .host()
        .ok_or_else(|| EnvError::Kubeconfig(format!("no host in the apiserver's address {apiserver}")))?;
    let port = apiserver.port_u16().unwrap_or(443);
    let labels = json!({POD_LABEL.0: POD_LABEL.1});
    Ok(json!({
        "metadata": {"name": NAME, "labels": labels},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "priorityClassName": "system-cluster-critical",
                    "serviceAccountName": NAME,
                    // The simulated nodes run nothing.
                    "nodeSelector": {REAL_NODE_LABEL.0: REAL_NODE_LABEL.1},
                    "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
                    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                        "weight": 100,
                        "podAffinityTerm": {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"},
                    }]}},
                    // Its own resolver is not itself.
                    "dnsPolicy": "Default",
                    "containers": [{
                        "name": NAME,
                        "image": image(registry, NAME),
                        "args": ["-conf", "/etc/coredns/Corefile"],
                        // In-cluster configuration at the apiserver's own address: the
                        // `kubernetes` Service has no endpoints here (--endpoint-reconciler-type=none).
                        "env": [
                            {"name": "KUBERNETES_SERVICE_HOST", "value": host},
                            {"name": "KUBERNETES_SERVICE_PORT", "value": port.to_string()},
                        ],
                        "ports": [
                            {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                            {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
                        ],
                        "resources": {"requests": {"cpu": "100m", "memory": "70Mi"}, "limits": {"memory": "170Mi"}},
                        // Non-root without NET_BIND_SERVICE: containerd 2 lets a pod bind port 53
                        // (enable_unprivileged_ports).
                        "securityContext": {
                            "runAsNonRoot": true,
                            "runAsUser": 65532,
                            "runAsGroup": 65532,
                            "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "capabilities": {"drop": ["ALL"]},
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "livenessProbe": {
                            "httpGet": {"path": "/health", "port": 8080},
                            "initialDelaySeconds": 60, "timeoutSeconds": 5, "failureThreshold": 5,
                        },
                        // Every second rather than upstream's 10: `up` waits for it.
                        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 1},
                        "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": true}],
                    }],
                    "volumes": [{"name": "config", "configMap": {"name": NAME, "items": [{"key": "Corefile", "path": "Corefile"}]}}],
                },
            },
        },
    }))
}

/// Server-side applies `object` (its kind and version from `K`) as `name`.
async fn apply_json<K>(api: &Api<K>, name: &str, mut object: Value) -> Result<(), EnvError>
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + DeserializeOwned,
{
    object["apiVersion"] = Value::from(K::api_version(&()).into_owned());
    object["kind"] = Value::from(K::kind(&()).into_owned());
    api.patch(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&object))
        .await
        .map_err(EnvError::kube(format!("apply {} {name}", K::kind(&()))))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_corefile_names_the_internet_host_and_forwards_nowhere() {
        let corefile = corefile("198.51.100.1");
        assert!(
            corefile.contains("\n        198.51.100.1 internet.test\n"),
            "{corefile}"
        );
        assert!(corefile.contains("kubernetes cluster.local "), "{corefile}");
        assert!(!corefile.contains("forward"), "{corefile}");
    }
}
