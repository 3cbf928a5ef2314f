//! Tags in the local registry through its HTTP API (distribution's `/v2/`): a new tag of an
//! image that is already there, which no node holds until it pulls it by that name.

use axum::body::Bytes;
use http::{Method, Request, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// What the registry stores: OCI and Docker manifests, and indexes of either.
const MANIFEST_TYPES: &str = "application/vnd.oci.image.manifest.v1+json, \
    application/vnd.oci.image.index.v1+json, \
    application/vnd.docker.distribution.manifest.v2+json, \
    application/vnd.docker.distribution.manifest.list.v2+json";

/// Tags `repository:from` as `repository:to` in the plain-HTTP registry at `registry` (host:port).
pub async fn retag(registry: &str, repository: &str, from: &str, to: &str) -> Result<(), String> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let url = |tag: &str| format!("http://{registry}/v2/{repository}/manifests/{tag}");
    let get = Request::builder()
        .method(Method::GET)
        .uri(url(from))
        .header(header::ACCEPT, MANIFEST_TYPES)
        .body(Full::default())
        .map_err(|e| e.to_string())?;
    let response = client.request(get).await.map_err(|e| format!("GET {from}: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("GET {repository}:{from}: {}", response.status()));
    }
    let media_type = response.headers().get(header::CONTENT_TYPE).cloned();
    let manifest = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    let mut put = Request::builder().method(Method::PUT).uri(url(to));
    if let Some(media_type) = media_type {
        put = put.header(header::CONTENT_TYPE, media_type);
    }
    let put = put.body(Full::new(manifest)).map_err(|e| e.to_string())?;
    let response = client.request(put).await.map_err(|e| format!("PUT {to}: {e}"))?;
    if response.status().is_success() {
        Ok(())
    } else {
        Err(format!("PUT {repository}:{to}: {}", response.status()))
    }
}
