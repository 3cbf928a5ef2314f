//! The one place where the Kubernetes client is built.

use http::{Request, Response};
use hyper_rustls::FixedServerNameResolver;
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::{Body, ClientBuilder, ConfigExt, DynBody, RustlsTlsError};
use kube::config::{KubeConfigOptions, Kubeconfig};
use rustls_pki_types::ServerName;
use tower::timeout::TimeoutLayer;
use tower::util::BoxService;
use tower::{BoxError, ServiceBuilder, ServiceExt};

use crate::deadlines::{KUBE_CONNECT_TIMEOUT, KUBE_READ_TIMEOUT, KUBE_WRITE_TIMEOUT};

use super::ClusterError;
use crate::config::Config;
use crate::eks::{BearerAuthLayer, EksError, KubeTimeouts, TokenSource, describe_cluster, kube_config};

/// Who calls, in the apiserver's audit log and as the field manager of what it creates
/// (without one, the apiserver records "unknown").
const USER_AGENT: &str = concat!("stack-provisioner/", env!("CARGO_PKG_VERSION"));

/// Per-call limits, from [`crate::deadlines`].
const TIMEOUTS: KubeTimeouts = KubeTimeouts {
    connect: KUBE_CONNECT_TIMEOUT,
    read: KUBE_READ_TIMEOUT,
    write: KUBE_WRITE_TIMEOUT,
};

/// Builds the one Kubernetes client of the process for EKS cluster `cluster_name`.
///
/// Credentials come from the SDK's provider at each renewal, so rotated role credentials are
/// picked up. A first token is minted here so that missing credentials stop start-up.
async fn eks_kube_client(
    sdk: &aws_config::SdkConfig,
    cluster_name: &str,
    timeouts: KubeTimeouts,
) -> Result<kube::Client, EksError> {
    let region = sdk.region().ok_or(EksError::NoRegion)?.to_string();
    let credentials = sdk.credentials_provider().ok_or(EksError::NoCredentialsProvider)?;
    let endpoint = describe_cluster(&aws_sdk_eks::Client::new(sdk), cluster_name).await?;
    let config = kube_config(&endpoint, timeouts).await?;
    let source = std::sync::Arc::new(TokenSource::new(credentials, &region, cluster_name));
    source.header_at(std::time::SystemTime::now()).await?;
    let builder = client_builder(&config).map_err(|e| EksError::KubeClient(e.to_string()))?;
    tracing::info!(cluster = cluster_name, endpoint = %endpoint.url, "EKS client ready");
    Ok(builder.with_layer(&BearerAuthLayer::new(source)).build())
}

/// Sets the production limits on a client configuration (also used by the test harness, so
/// tests talk to the apiserver exactly as the functions do).
pub fn apply_client_limits(config: &mut kube::Config) {
    TIMEOUTS.apply_to(config);
}

/// Builds the client: EKS token auth when `EKS_CLUSTER_NAME` is set, otherwise the kubeconfig
/// (`K8S_KUBECONFIG`, else `KUBECONFIG`/`~/.kube/config`) and `K8S_CONTEXT`.
pub(crate) async fn connect(config: &Config, aws: &aws_config::SdkConfig) -> Result<kube::Client, ClusterError> {
    if let Some(cluster) = &config.cluster.eks_cluster_name {
        return eks_kube_client(aws, cluster, TIMEOUTS)
            .await
            .map_err(|e| ClusterError::Setup(e.to_string()));
    }
    let kubeconfig = match &config.cluster.kubeconfig {
        Some(path) => Kubeconfig::read_from(path),
        None => Kubeconfig::read(),
    }
    .map_err(|e| ClusterError::Setup(format!("reading kubeconfig: {e}")))?;
    let options = KubeConfigOptions {
        context: config.cluster.context.clone(),
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
pub(crate) type KubeService = BoxService<Request<Body>, Response<Box<DynBody>>, BoxError>;

/// What kube's own `ClientBuilder::try_from(Config)` builds (TLS and auth from the config, the
/// config's timeouts), with our [`USER_AGENT`] (kube sends none) and three differences:
/// - TCP connections with `TCP_NODELAY`. kube does not set it (kube-rs/kube#2056): a request
///   written right after the TLS handshake of a new connection then waited for the
///   apiserver's delayed ACK, ~40 ms per watch.
/// - HTTP/2 when the apiserver offers it (ALPN), as client-go does; kube speaks only HTTP/1.1
///   (kube-rs/kube#1923, for the sake of websocket upgrades, which nothing here uses). Every
///   call shares one connection, and a watch ended early resets its stream instead of closing
///   its connection: over HTTP/1.1 each create's watch cost a new TCP and TLS handshake.
/// - The read timeout also bounds the wait for an answer's head. The connector's read timeout
///   watches the connection, which HTTP/2 shares: while other calls' answers arrive on it, a
///   call the apiserver never answers (queued by priority and fairness, etcd stalled) would
///   otherwise wait until its caller's own deadline.
pub fn client_builder(config: &kube::Config) -> Result<ClientBuilder<KubeService>, kube::Error> {
    let mut config = config.clone();
    if !config.headers.iter().any(|(name, _)| name == http::header::USER_AGENT) {
        config
            .headers
            .push((http::header::USER_AGENT, http::HeaderValue::from_static(USER_AGENT)));
    }
    let config = &config;
    if config.proxy_url.is_some() {
        // A proxy from the kubeconfig: kube's own builder knows how to reach it.
        return ClientBuilder::try_from(config.clone());
    }
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    let mut tls = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = ServerName::try_from(name.clone())
            .map_err(|e| kube::Error::RustlsTls(RustlsTlsError::InvalidServerName(e)))?;
        tls = tls.with_server_name_resolver(FixedServerNameResolver::new(name));
    }
    let tls = tls.enable_http1().enable_http2().wrap_connector(tcp);
    let mut connector = TimeoutConnector::new(tls);
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
        .option_layer(config.read_timeout.map(TimeoutLayer::new))
        .map_err(BoxError::from)
        .service(http)
        .map_response(|response| {
            response.map(|body| Box::new(http_body_util::BodyExt::map_err(body, BoxError::from)) as Box<DynBody>)
        })
        .boxed();
    Ok(ClientBuilder::new(service, config.default_namespace.clone()))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;
    use crate::eks::test_support::get_version;

    /// A config for a plain-HTTP "apiserver" on `port`, with a bearer token and short timeouts.
    fn config(port: u16) -> kube::Config {
        let mut config = kube::Config::new(format!("http://127.0.0.1:{port}").parse().unwrap());
        config.auth_info.token = Some("secret-token".to_owned().into());
        config.read_timeout = Some(Duration::from_millis(300));
        config
    }

    /// A listener on a free loopback port, and the port.
    async fn local_listener() -> (TcpListener, u16) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        (listener, port)
    }

    /// Accepts one connection and reads (the start of) its request.
    async fn accept_request(listener: TcpListener) -> (TcpStream, String) {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = vec![0; 4096];
        let n = socket.read(&mut request).await.unwrap();
        let text = String::from_utf8_lossy(&request[..n]).into_owned();
        (socket, text)
    }

    #[tokio::test]
    async fn requests_carry_the_configs_credentials_to_its_server() {
        let (listener, port) = local_listener().await;
        let server = tokio::spawn(async move {
            let (mut socket, request) = accept_request(listener).await;
            socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await
                .unwrap();
            request.to_lowercase()
        });
        let client = client_builder(&config(port)).unwrap().build();
        assert_eq!(get_version(&client).await.unwrap(), "ok");
        let request = server.await.unwrap();
        assert!(request.starts_with("get /version http/1.1"), "{request}");
        assert!(request.contains("authorization: bearer secret-token"), "{request}");
        assert!(request.contains("user-agent: stack-provisioner/"), "{request}");
    }

    #[tokio::test]
    async fn a_server_that_never_answers_fails_the_call_at_the_read_timeout() {
        let (listener, port) = local_listener().await;
        let _silent = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(socket);
        });
        let client = client_builder(&config(port)).unwrap().build();
        let outcome = tokio::time::timeout(Duration::from_secs(10), get_version(&client)).await;
        assert!(
            matches!(outcome, Ok(Err(_))),
            "the call must fail, not hang: {outcome:?}"
        );
    }

    /// Over HTTP/2 other calls' answers keep a connection busy while one call waits; here the
    /// server keeps it busy by sending the head a byte at a time, faster than the read timeout.
    #[tokio::test]
    async fn a_call_unanswered_at_the_read_timeout_fails_while_its_connection_is_busy() {
        let (listener, port) = local_listener().await;
        let _trickling = tokio::spawn(async move {
            let (mut socket, _) = accept_request(listener).await;
            socket.write_all(b"HTTP/1.1 200 OK\r\nx-padding: ").await.unwrap();
            for _ in 0..600 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if socket.write_all(b"a").await.is_err() {
                    return;
                }
            }
        });
        let client = client_builder(&config(port)).unwrap().build();
        let started = std::time::Instant::now();
        let outcome = tokio::time::timeout(Duration::from_secs(10), get_version(&client)).await;
        let Ok(Err(err)) = outcome else {
            panic!("the call must fail, not hang: {outcome:?}");
        };
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "failed after {:?}",
            started.elapsed()
        );
        assert!(
            ClusterError::from_kube("get version", err).is_transient(),
            "an unanswered call is the apiserver's trouble: the client is told to retry"
        );
    }
}
