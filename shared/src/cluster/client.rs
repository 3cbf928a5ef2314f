//! The one place where the Kubernetes client is built.

use http::{Request, Response};
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::{Body, ClientBuilder, ConfigExt, DynBody};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tower::util::BoxService;
use tower::{BoxError, ServiceBuilder, ServiceExt};

use crate::deadlines::{KUBE_CONNECT_TIMEOUT, KUBE_READ_TIMEOUT, KUBE_WRITE_TIMEOUT};

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
    client_builder(&client_config)
        .map(ClientBuilder::build)
        .map_err(|e| ClusterError::Setup(e.to_string()))
}

/// The service stack under a [`ClientBuilder`], boxed so that layers can be added on top.
pub type KubeService = BoxService<Request<Body>, Response<Box<DynBody>>, BoxError>;

/// What kube's own `ClientBuilder::try_from(Config)` builds (TLS and auth from the config, the
/// config's timeouts), over TCP connections with `TCP_NODELAY`. kube does not set it
/// (kube-rs/kube#2056): a request written right after the TLS handshake of a new connection
/// (every watch takes one) then waited for the apiserver's delayed ACK, ~40 ms per watch.
pub fn client_builder(config: &kube::Config) -> Result<ClientBuilder<KubeService>, kube::Error> {
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    let mut connector = TimeoutConnector::new(config.rustls_https_connector_with_connector(tcp)?);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http)
        .map_response(|response| {
            response.map(|body| Box::new(http_body_util::BodyExt::map_err(body, BoxError::from)) as Box<DynBody>)
        })
        .boxed();
    Ok(ClientBuilder::new(service, config.default_namespace.clone()))
}
