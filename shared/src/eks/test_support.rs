//! Test doubles shared by the eks module's tests (and the cluster client's).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_credential_types::provider::{ProvideCredentials, error::CredentialsError, future};

/// `GET /version` through `client`, the smallest call a test of a client's plumbing can make.
pub(crate) async fn get_version(client: &kube::Client) -> Result<String, kube::Error> {
    client
        .request_text(http::Request::get("/version").body(Vec::new()).unwrap())
        .await
}

/// Hands out numbered credentials (or fails while `fail` is set) and counts how often it was asked.
#[derive(Debug, Clone, Default)]
pub(super) struct CountingProvider {
    pub calls: Arc<AtomicUsize>,
    pub fail: Arc<AtomicBool>,
    pub expiry: Option<SystemTime>,
}

impl ProvideCredentials for CountingProvider {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        if self.fail.load(Ordering::SeqCst) {
            return future::ProvideCredentials::ready(Err(CredentialsError::not_loaded("no credentials here")));
        }
        let creds = Credentials::new(format!("AKID{n}"), "secret", None, self.expiry, "counting");
        future::ProvideCredentials::ready(Ok(creds))
    }
}
