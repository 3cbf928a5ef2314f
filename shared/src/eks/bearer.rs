//! Tower middleware putting the current EKS token on every Kubernetes request.
//!
//! kube's client drives its service stack from one buffer worker that calls `poll_ready`
//! before each `call`, so the token is renewed in `poll_ready` (at most once at a time) and
//! attached in `call`; the inner stack is never cloned or rebuilt.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::SystemTime;

use futures::future::BoxFuture;
use http::header::AUTHORIZATION;
use http::{HeaderValue, Request};
use tower::{BoxError, Layer, Service};

use super::EksError;
use super::token_source::TokenSource;

#[derive(Clone)]
pub(crate) struct BearerAuthLayer {
    source: Arc<TokenSource>,
}

impl BearerAuthLayer {
    pub(crate) fn new(source: Arc<TokenSource>) -> Self {
        Self { source }
    }
}

impl<S> Layer<S> for BearerAuthLayer {
    type Service = BearerAuth<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BearerAuth {
            inner,
            source: self.source.clone(),
            minting: None,
            next: None,
        }
    }
}

pub(crate) struct BearerAuth<S> {
    inner: S,
    source: Arc<TokenSource>,
    minting: Option<BoxFuture<'static, Result<HeaderValue, EksError>>>,
    /// The header (or the reason there is none) for the request `call` receives next.
    next: Option<Result<HeaderValue, EksError>>,
}

impl<S, B> Service<Request<B>> for BearerAuth<S>
where
    S: Service<Request<B>>,
    S::Response: Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if self.next.is_none() {
            let outcome = match self.source.fresh(SystemTime::now()) {
                Some(header) => Ok(header),
                None => {
                    let source = self.source.clone();
                    let minting = self
                        .minting
                        .get_or_insert_with(|| Box::pin(async move { source.header_at(SystemTime::now()).await }));
                    let outcome = ready!(Pin::new(minting).poll(cx));
                    self.minting = None;
                    outcome
                }
            };
            self.next = Some(outcome);
        }
        // A failed renewal fails only the request at hand (in `call`): an error from
        // `poll_ready` would poison kube's buffer and with it every later request.
        if matches!(self.next, Some(Err(_))) {
            return Poll::Ready(Ok(()));
        }
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        match self.next.take() {
            Some(Ok(header)) => {
                request.headers_mut().insert(AUTHORIZATION, header);
                let response = self.inner.call(request);
                Box::pin(async move { response.await.map_err(Into::into) })
            }
            Some(Err(err)) => Box::pin(std::future::ready(Err(err.into()))),
            None => Box::pin(std::future::ready(Err("BearerAuth called before poll_ready".into()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eks::test_support::{CountingProvider, get_version};
    use aws_credential_types::provider::SharedCredentialsProvider;
    use std::convert::Infallible;
    use std::sync::Mutex;
    use std::sync::atomic::Ordering;

    /// A kube client whose "apiserver" records the Authorization header of every request.
    fn client(provider: &CountingProvider) -> (kube::Client, Arc<Mutex<Vec<Option<String>>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recorder = seen.clone();
        let apiserver = tower::service_fn(move |request: Request<kube::client::Body>| {
            let auth = request
                .headers()
                .get(AUTHORIZATION)
                .map(|v| v.to_str().unwrap_or("<binary>").to_owned());
            recorder.lock().unwrap().push(auth);
            async { Ok::<_, Infallible>(http::Response::new(kube::client::Body::from(b"ok".to_vec()))) }
        });
        let source = Arc::new(TokenSource::new(
            SharedCredentialsProvider::new(provider.clone()),
            "eu-west-1",
            "ctf",
        ));
        let client = kube::client::ClientBuilder::new(apiserver, "default")
            .with_layer(&BearerAuthLayer::new(source))
            .build();
        (client, seen)
    }

    #[tokio::test]
    async fn every_request_carries_the_same_cached_token() {
        let provider = CountingProvider::default();
        let (client, seen) = client(&provider);
        assert_eq!(get_version(&client).await.unwrap(), "ok");
        assert_eq!(get_version(&client).await.unwrap(), "ok");
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2);
        let first = seen[0].clone().expect("authorization header");
        assert!(first.starts_with("Bearer k8s-aws-v1."), "{first}");
        assert_eq!(seen[1].as_deref(), Some(first.as_str()));
        assert_eq!(provider.calls.load(Ordering::SeqCst), 1, "token minted once");
    }

    #[tokio::test]
    async fn a_credentials_outage_fails_requests_without_breaking_the_client() {
        let provider = CountingProvider::default();
        provider.fail.store(true, Ordering::SeqCst);
        let (client, seen) = client(&provider);
        let err = get_version(&client).await.unwrap_err();
        assert!(err.to_string().contains("credentials"), "{err}");
        assert!(
            seen.lock().unwrap().is_empty(),
            "no unauthenticated request may reach the apiserver"
        );

        provider.fail.store(false, Ordering::SeqCst);
        assert_eq!(get_version(&client).await.unwrap(), "ok");
        assert_eq!(seen.lock().unwrap().len(), 1);
    }
}
