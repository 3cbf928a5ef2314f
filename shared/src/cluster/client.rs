//! The one place where the Kubernetes client is built.

use crate::deadlines::{KUBE_CONNECT_TIMEOUT, KUBE_READ_TIMEOUT, KUBE_WRITE_TIMEOUT};
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::ClusterError;
use crate::config::Config;
use crate::eks::KubeTimeouts;

/// Per-call limits, from [`crate::deadlines`].
const TIMEOUTS: KubeTimeouts = KubeTimeouts {
    connect: KUBE_CONNECT_TIMEOUT,
    read: KUBE_READ_TIMEOUT,
    write: KUBE_WRITE_TIMEOUT,
};

/// Sets the production limits on a client configuration (also used by the test harness, so
/// tests talk to the apiserver exactly as the functions do).
pub fn apply_client_limits(config: &mut kube::Config) {
    TIMEOUTS.apply_to(config);
}

/// Builds the client: EKS token auth when `EKS_CLUSTER_NAME` is set, otherwise the kubeconfig
/// (`K8S_KUBECONFIG`, else `KUBECONFIG`/`~/.kube/config`) and `K8S_CONTEXT`.
pub async fn connect(config: &Config, aws: &aws_config::SdkConfig) -> Result<kube::Client, ClusterError> {
    if let Some(cluster) = &config.eks_cluster_name {
        return crate::eks::eks_kube_client(aws, cluster, TIMEOUTS)
            .await
            .map_err(|e| ClusterError::Setup(e.to_string()));
    }
    let kubeconfig = match &config.kubeconfig {
        Some(path) => Kubeconfig::read_from(path),
        None => Kubeconfig::read(),
    }
    .map_err(|e| ClusterError::Setup(format!("reading kubeconfig: {e}")))?;
    let options = KubeConfigOptions {
        context: config.kube_context.clone(),
        ..KubeConfigOptions::default()
    };
    let mut client_config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| ClusterError::Setup(format!("loading kubeconfig: {e}")))?;
    apply_client_limits(&mut client_config);
    kube::Client::try_from(client_config).map_err(|e| ClusterError::Setup(e.to_string()))
}
