//! Where the cluster is and which CA signs its apiserver certificate: EKS DescribeCluster,
//! turned into a kube client configuration without any credentials in it.

use std::time::Duration;

use kube::config::{Cluster, Context, KubeConfigOptions, Kubeconfig, NamedCluster, NamedContext};

use super::EksError;

/// Connection limits of the Kubernetes client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KubeTimeouts {
    pub connect: Duration,
    pub read: Duration,
    pub write: Duration,
}

impl KubeTimeouts {
    /// Sets these limits on `config`, the same for every way the client is built.
    pub(crate) fn apply_to(&self, config: &mut kube::Config) {
        config.connect_timeout = Some(self.connect);
        config.read_timeout = Some(self.read);
        config.write_timeout = Some(self.write);
        // The read timeout counts from the request, not from when its pooled connection went
        // idle: without this, a connection idle for longer than `read` fails its next call.
        config.reset_reader_on_write = true;
        // kube retries 429/503/504 for up to minutes (honouring Retry-After); our callers have
        // deadlines of seconds and answer 503 themselves, and the reconciler retries next pass.
        config.default_retry = false;
    }
}

/// The apiserver endpoint and its CA bundle (base64 PEM, as EKS and kubeconfig carry it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClusterEndpoint {
    pub url: String,
    pub ca_data: String,
}

pub(crate) async fn describe_cluster(eks: &aws_sdk_eks::Client, name: &str) -> Result<ClusterEndpoint, EksError> {
    let output = eks
        .describe_cluster()
        .name(name)
        .send()
        .await
        .map_err(|e| EksError::describe_cluster(name, e))?;
    let incomplete = |missing| EksError::ClusterIncomplete {
        cluster: name.to_owned(),
        missing,
    };
    let cluster = output.cluster().ok_or_else(|| incomplete("description"))?;
    let url = cluster.endpoint().ok_or_else(|| incomplete("endpoint"))?;
    let ca_data = cluster
        .certificate_authority()
        .and_then(|c| c.data())
        .ok_or_else(|| incomplete("certificate authority"))?;
    Ok(ClusterEndpoint {
        url: url.to_owned(),
        ca_data: ca_data.to_owned(),
    })
}

/// A kube configuration for `endpoint` that trusts only the cluster's CA and carries no
/// credentials: the bearer layer adds them per request.
pub(crate) async fn kube_config(endpoint: &ClusterEndpoint, timeouts: KubeTimeouts) -> Result<kube::Config, EksError> {
    const NAME: &str = "eks";
    // A kubeconfig in memory lets kube decode and parse the CA bundle exactly as it does for files.
    let kubeconfig = Kubeconfig {
        clusters: vec![NamedCluster {
            name: NAME.into(),
            cluster: Some(Cluster {
                server: Some(endpoint.url.clone()),
                certificate_authority_data: Some(endpoint.ca_data.clone()),
                ..Cluster::default()
            }),
            ..NamedCluster::default()
        }],
        contexts: vec![NamedContext {
            name: NAME.into(),
            context: Some(Context {
                cluster: NAME.into(),
                ..Context::default()
            }),
            ..NamedContext::default()
        }],
        current_context: Some(NAME.into()),
        ..Kubeconfig::default()
    };
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| EksError::KubeClient(e.to_string()))?;
    timeouts.apply_to(&mut config);
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;

    const CA_PEM: &str = include_str!("testdata/cluster-ca.pem");
    const TIMEOUTS: KubeTimeouts = KubeTimeouts {
        connect: Duration::from_secs(2),
        read: Duration::from_secs(5),
        write: Duration::from_secs(4),
    };

    fn endpoint(ca_data: String) -> ClusterEndpoint {
        ClusterEndpoint {
            url: "https://abcdef.gr7.eu-west-1.eks.amazonaws.com".into(),
            ca_data,
        }
    }

    #[tokio::test]
    async fn config_trusts_the_cluster_ca_and_carries_no_credentials() {
        let config = kube_config(&endpoint(STANDARD.encode(CA_PEM)), TIMEOUTS).await.unwrap();
        assert_eq!(
            config.cluster_url.host(),
            Some("abcdef.gr7.eu-west-1.eks.amazonaws.com")
        );
        let certs = config.root_cert.as_ref().expect("root cert");
        assert_eq!(certs.len(), 1);
        assert!(!config.accept_invalid_certs);
        assert_eq!(config.connect_timeout, Some(TIMEOUTS.connect));
        assert_eq!(config.read_timeout, Some(TIMEOUTS.read));
        assert_eq!(config.write_timeout, Some(TIMEOUTS.write));
        assert!(
            config.reset_reader_on_write,
            "an idle pooled connection must not time out its next call"
        );
        assert!(!config.default_retry);
        assert!(config.auth_info.token.is_none() && config.auth_info.exec.is_none());
    }

    #[tokio::test]
    async fn a_garbled_ca_is_an_error() {
        let err = kube_config(&endpoint("not base64!".into()), TIMEOUTS)
            .await
            .unwrap_err();
        assert!(matches!(err, EksError::KubeClient(_)), "{err}");
    }
}
