//! Mints EKS tokens from the SDK's credentials provider and keeps the current one until it is
//! due for renewal.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_smithy_types::error::display::DisplayErrorContext;
use http::HeaderValue;

use super::EksError;
use super::token::{TOKEN_LIFETIME, eks_token};

/// Renewing 5 minutes before the token's end leaves room for clock skew and slow requests.
pub(crate) const TOKEN_REFRESH_AFTER: Duration = TOKEN_LIFETIME.saturating_sub(Duration::from_secs(5 * 60));
/// Role credentials must outlive the token signed with them by at least this much.
const CREDENTIALS_MARGIN: Duration = Duration::from_secs(60);

/// The `Authorization` value for one cluster, renewed on demand.
///
/// Wall-clock time decides freshness: a frozen Lambda sandbox does not advance the monotonic
/// clock, while EKS judges the token by `X-Amz-Date`.
pub(crate) struct TokenSource {
    credentials: SharedCredentialsProvider,
    region: String,
    cluster: String,
    current: Mutex<Option<CurrentToken>>,
}

#[derive(Clone)]
struct CurrentToken {
    header: HeaderValue,
    signed_at: SystemTime,
    renew_at: SystemTime,
}

impl TokenSource {
    pub(crate) fn new(credentials: SharedCredentialsProvider, region: &str, cluster: &str) -> Self {
        Self {
            credentials,
            region: region.to_owned(),
            cluster: cluster.to_owned(),
            current: Mutex::new(None),
        }
    }

    /// The current header if it is still fresh at `now`.
    pub(crate) fn fresh(&self, now: SystemTime) -> Option<HeaderValue> {
        let current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        current
            .as_ref()
            .filter(|t| now >= t.signed_at && now < t.renew_at)
            .map(|t| t.header.clone())
    }

    /// The fresh header at `now`, minting a new token (with freshly resolved credentials) when due.
    pub(crate) async fn header_at(&self, now: SystemTime) -> Result<HeaderValue, EksError> {
        if let Some(header) = self.fresh(now) {
            return Ok(header);
        }
        let credentials = self
            .credentials
            .provide_credentials()
            .await
            .map_err(|e| EksError::Credentials(DisplayErrorContext(e).to_string()))?;
        let token = eks_token(&credentials, &self.region, &self.cluster, now)?;
        let mut header =
            HeaderValue::try_from(format!("Bearer {token}")).map_err(|e| EksError::Signing(e.to_string()))?;
        header.set_sensitive(true);
        let renew_at = renewal_time(now, credentials.expiry());
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(CurrentToken {
            header: header.clone(),
            signed_at: now,
            renew_at,
        });
        tracing::debug!(cluster = %self.cluster, "minted EKS token");
        Ok(header)
    }
}

/// When a token signed at `signed_at` is due: after [`TOKEN_REFRESH_AFTER`], or earlier when
/// the credentials that signed it expire first.
pub(crate) fn renewal_time(signed_at: SystemTime, credentials_expiry: Option<SystemTime>) -> SystemTime {
    let by_age = signed_at + TOKEN_REFRESH_AFTER;
    match credentials_expiry.and_then(|e| e.checked_sub(CREDENTIALS_MARGIN)) {
        Some(by_credentials) => by_age.min(by_credentials),
        None => by_age,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eks::test_support::CountingProvider;
    use std::sync::atomic::Ordering;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn source(provider: &CountingProvider) -> TokenSource {
        TokenSource::new(SharedCredentialsProvider::new(provider.clone()), "eu-west-1", "ctf")
    }

    #[tokio::test]
    async fn token_is_reused_until_renewal_then_reminted() {
        let provider = CountingProvider::default();
        let source = source(&provider);
        let first = source.header_at(at(1_000)).await.unwrap();
        assert!(first.to_str().unwrap().starts_with("Bearer k8s-aws-v1."));
        assert!(first.is_sensitive());
        let nine_minutes_later = source.header_at(at(1_000 + 9 * 60)).await.unwrap();
        assert_eq!(first, nine_minutes_later);
        assert_eq!(provider.calls.load(Ordering::SeqCst), 1);

        let ten_minutes_later = source.header_at(at(1_000 + 10 * 60)).await.unwrap();
        assert_ne!(first, ten_minutes_later);
        assert_eq!(provider.calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_clock_that_went_back_mints_a_new_token() {
        let provider = CountingProvider::default();
        let source = source(&provider);
        source.header_at(at(1_000)).await.unwrap();
        assert!(source.fresh(at(999)).is_none());
    }

    #[tokio::test]
    async fn expiring_credentials_shorten_the_token_life() {
        let provider = CountingProvider {
            expiry: Some(at(1_000 + 5 * 60)),
            ..Default::default()
        };
        let source = source(&provider);
        source.header_at(at(1_000)).await.unwrap();
        assert!(source.fresh(at(1_000 + 3 * 60)).is_some());
        assert!(
            source.fresh(at(1_000 + 4 * 60)).is_none(),
            "must renew a minute before the credentials expire"
        );
    }

    #[tokio::test]
    async fn credential_failures_are_reported_and_retried() {
        let provider = CountingProvider::default();
        provider.fail.store(true, Ordering::SeqCst);
        let source = source(&provider);
        let err = source.header_at(at(1_000)).await.unwrap_err();
        assert!(
            matches!(err, EksError::Credentials(ref m) if m.contains("no credentials here")),
            "{err}"
        );
        assert!(source.header_at(at(1_001)).await.is_err());
        assert_eq!(provider.calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn renewal_is_ten_minutes_after_signing_without_expiring_credentials() {
        assert_eq!(renewal_time(at(0), None), at(600));
        assert_eq!(renewal_time(at(0), Some(at(3600))), at(600));
        assert_eq!(renewal_time(at(0), Some(at(300))), at(240));
    }
}
