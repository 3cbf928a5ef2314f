//! Start-up checks of what the configuration names: the table exists and the cluster is
//! there. A function configured for neither fails its init with one clear message instead of
//! answering every request with a 500 (or a 503 the platform retries forever).
//!
//! Only definite answers stop the start: a missing table, access denied, an apiserver that
//! refuses connections or credentials. A dependency that is slow, throttling or failing may
//! recover, and requests then answer 503 with `Retry-After` as the contract says; a failed init
//! would turn them into API Gateway's bare 502.

use std::error::Error as _;

use crate::cluster::{Cluster, ClusterError};
use crate::config::Config;
use crate::store::{Store, StoreError};
use crate::telemetry::error_chain;

/// Why the configured table or cluster cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error("DynamoDB table {table} (DDB_STACK_TABLE) cannot be used: {source}")]
    Table { table: String, source: StoreError },
    #[error("no Kubernetes cluster for {cluster}: nothing listens at its apiserver's address (connection refused)")]
    NoCluster { cluster: String, source: ClusterError },
    #[error("the Kubernetes cluster of {cluster} refuses the functions: {}", error_chain(.source))]
    ClusterRefused { cluster: String, source: ClusterError },
}

/// Checks the table and the cluster at once; see the module's header for what fails.
pub(crate) async fn check(config: &Config, store: &Store, cluster: &Cluster) -> Result<(), PreflightError> {
    let (table, apiserver) = tokio::join!(store.ping(), cluster.ping());
    match table {
        Err(err) if err.is_transient() => {
            tracing::warn!(error = %err, table = %config.table, "DynamoDB did not answer at start-up; requests will answer 503 until it does");
        }
        Err(source) => {
            return Err(PreflightError::Table {
                table: config.table.clone(),
                source,
            });
        }
        Ok(()) => {}
    }
    match apiserver {
        Err(source) if refuses_connections(&source) => Err(PreflightError::NoCluster {
            cluster: describe_cluster(config),
            source,
        }),
        Err(err) if err.is_transient() => {
            tracing::warn!(error = %err, "the apiserver did not answer at start-up; requests will answer 503 until it does");
            Ok(())
        }
        Err(source) => Err(PreflightError::ClusterRefused {
            cluster: describe_cluster(config),
            source,
        }),
        Ok(()) => Ok(()),
    }
}

/// Nothing listens where the cluster should be: no apiserver, rather than a busy one.
fn refuses_connections(err: &ClusterError) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = err.source();
    while let Some(error) = cause {
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        cause = error.source();
    }
    false
}

/// Where the configuration says the cluster is, for the message.
fn describe_cluster(config: &Config) -> String {
    match (&config.cluster.eks_cluster_name, &config.cluster.kubeconfig) {
        (Some(name), _) => format!("EKS cluster {name} (EKS_CLUSTER_NAME)"),
        (None, Some(path)) => format!("the kubeconfig {path} (K8S_KUBECONFIG)"),
        (None, None) => "the default kubeconfig (EKS_CLUSTER_NAME is not set)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_connection_is_told_apart_from_a_slow_apiserver() {
        let refused = ClusterError::Unavailable {
            operation: "get version",
            source: kube::Error::Service(Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))),
        };
        assert!(refuses_connections(&refused));
        let timed_out = ClusterError::Unavailable {
            operation: "get version",
            source: kube::Error::Service(Box::new(std::io::Error::from(std::io::ErrorKind::TimedOut))),
        };
        assert!(!refuses_connections(&timed_out));
    }
}
