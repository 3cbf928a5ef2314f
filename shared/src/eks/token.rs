//! The EKS bearer token: a presigned STS `GetCallerIdentity` URL, made as aws-iam-authenticator
//! and `aws eks get-token` make it. Pure: no clock, no I/O.

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SignatureLocation, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::EksError;

pub(crate) const TOKEN_PREFIX: &str = "k8s-aws-v1.";
/// Signed header naming the cluster: EKS refuses a token minted for another cluster.
pub(crate) const CLUSTER_ID_HEADER: &str = "x-k8s-aws-id";
/// `X-Amz-Expires` of the URL, as aws-iam-authenticator sets it. EKS ignores it and accepts
/// the token for [`TOKEN_LIFETIME`] after `X-Amz-Date`.
pub(crate) const PRESIGN_EXPIRES: Duration = Duration::from_secs(60);
pub(crate) const TOKEN_LIFETIME: Duration = Duration::from_secs(15 * 60);
const OPERATION_QUERY: &str = "Action=GetCallerIdentity&Version=2011-06-15";
const SIGNATURE_PARAM: &str = "X-Amz-Signature";

/// The regional STS host EKS accepts for `region` (China regions live under `.com.cn`).
pub(crate) fn sts_host(region: &str) -> String {
    let suffix = if region.starts_with("cn-") {
        "amazonaws.com.cn"
    } else {
        "amazonaws.com"
    };
    format!("sts.{region}.{suffix}")
}

/// `k8s-aws-v1.` + base64url (no padding) of [`eks_presigned_url`].
pub fn eks_token(credentials: &Credentials, region: &str, cluster: &str, time: SystemTime) -> Result<String, EksError> {
    let url = eks_presigned_url(credentials, region, cluster, time)?;
    Ok(format!("{TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(url)))
}

/// The presigned `GET https://sts.<region>.amazonaws.com/?Action=GetCallerIdentity&...` URL,
/// signed at `time` with `host` and `x-k8s-aws-id: <cluster>` as signed headers.
///
/// Parameters come in botocore's order (operation, auth, then the signature last), so the
/// token equals the one `aws eks get-token` makes with botocore's own signer.
pub fn eks_presigned_url(
    credentials: &Credentials,
    region: &str,
    cluster: &str,
    time: SystemTime,
) -> Result<String, EksError> {
    let base = format!("https://{}/?{OPERATION_QUERY}", sts_host(region));
    let identity = Identity::from(credentials.clone());
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(PRESIGN_EXPIRES);
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("sts")
        .time(time)
        .settings(settings)
        .build()
        .map_err(|e| EksError::Signing(e.to_string()))?
        .into();
    let request = SignableRequest::new(
        "GET",
        base.as_str(),
        std::iter::once((CLUSTER_ID_HEADER, cluster)),
        SignableBody::Bytes(&[]),
    )
    .map_err(|e| EksError::Signing(e.to_string()))?;
    let (instructions, _signature) = sign(request, &params)
        .map_err(|e| EksError::Signing(e.to_string()))?
        .into_parts();
    let (signature, auth): (Vec<_>, Vec<_>) = instructions
        .params()
        .iter()
        .partition(|(name, _)| *name == SIGNATURE_PARAM);
    let mut url = base;
    for (name, value) in auth.into_iter().chain(signature) {
        url.push('&');
        url.push_str(name);
        url.push('=');
        push_uri_encoded(&mut url, value);
    }
    Ok(url)
}

/// SigV4 URI encoding: everything but the unreserved characters becomes `%XX`.
fn push_uri_encoded(out: &mut String, value: &str) {
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};
    use std::collections::BTreeMap;

    const ACCESS_KEY: &str = "AKIDEXAMPLE";
    const SECRET_KEY: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    const SESSION_TOKEN: &str = "FQoGZXIvYXdzE+/x=";
    /// 2023-11-14T22:13:20Z
    const SIGNED_AT: u64 = 1_700_000_000;

    fn credentials(session_token: Option<&str>) -> Credentials {
        Credentials::new(ACCESS_KEY, SECRET_KEY, session_token.map(str::to_owned), None, "test")
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn decode(token: &str) -> String {
        let body = token.strip_prefix(TOKEN_PREFIX).expect("token prefix");
        assert!(!body.contains('='), "padding left in {body}");
        String::from_utf8(URL_SAFE_NO_PAD.decode(body).expect("base64url")).expect("utf-8")
    }

    /// Query parameters, percent-decoded, in URL order.
    fn query(url: &str) -> Vec<(String, String)> {
        let (_, query) = url.split_once('?').expect("query");
        query
            .split('&')
            .map(|pair| {
                let (k, v) = pair.split_once('=').expect("k=v");
                (k.to_owned(), percent_decode(v))
            })
            .collect()
    }

    fn percent_decode(v: &str) -> String {
        let bytes = v.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                out.push(u8::from_str_radix(&v[i + 1..i + 3], 16).expect("hex"));
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        String::from_utf8(out).expect("utf-8")
    }

    fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
        const BLOCK: usize = 64;
        let mut block = [0u8; BLOCK];
        if key.len() > BLOCK {
            block[..32].copy_from_slice(&Sha256::digest(key));
        } else {
            block[..key.len()].copy_from_slice(key);
        }
        let pad = |byte: u8| block.iter().map(|b| b ^ byte).collect::<Vec<u8>>();
        let inner = Sha256::new().chain_update(pad(0x36)).chain_update(data).finalize();
        Sha256::new()
            .chain_update(pad(0x5c))
            .chain_update(inner)
            .finalize()
            .to_vec()
    }

    /// SigV4 recomputed from the AWS documentation, independently of aws-sigv4.
    fn expected_signature(params: &[(String, String)], host: &str, cluster: &str, region: &str) -> String {
        let mut canonical_query: Vec<(String, String)> = params
            .iter()
            .filter(|(k, _)| k != SIGNATURE_PARAM)
            .map(|(k, v)| {
                let mut encoded = String::new();
                push_uri_encoded(&mut encoded, v);
                (k.clone(), encoded)
            })
            .collect();
        canonical_query.sort();
        let canonical_query = canonical_query
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&");
        let empty_body = hex::encode(Sha256::digest(b""));
        let canonical_request = format!(
            "GET\n/\n{canonical_query}\nhost:{host}\nx-k8s-aws-id:{cluster}\n\nhost;x-k8s-aws-id\n{empty_body}"
        );
        let map: BTreeMap<_, _> = params.iter().cloned().collect();
        let date_time = &map["X-Amz-Date"];
        let date = &date_time[..8];
        let scope = format!("{date}/{region}/sts/aws4_request");
        let string_to_sign = format!(
            "AWS4-HMAC-SHA256\n{date_time}\n{scope}\n{}",
            hex::encode(Sha256::digest(canonical_request.as_bytes()))
        );
        let mut key = hmac_sha256(format!("AWS4{SECRET_KEY}").as_bytes(), date.as_bytes());
        for part in [region, "sts", "aws4_request"] {
            key = hmac_sha256(&key, part.as_bytes());
        }
        hex::encode(hmac_sha256(&key, string_to_sign.as_bytes()))
    }

    #[test]
    fn token_is_a_presigned_get_caller_identity_url() {
        let token = eks_token(
            &credentials(Some(SESSION_TOKEN)),
            "eu-west-1",
            "ctf-cluster",
            at(SIGNED_AT),
        )
        .unwrap();
        let url = decode(&token);
        assert!(url.starts_with("https://sts.eu-west-1.amazonaws.com/?"), "{url}");
        let params = query(&url);
        let names: Vec<&str> = params.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "Action",
                "Version",
                "X-Amz-Algorithm",
                "X-Amz-Credential",
                "X-Amz-Date",
                "X-Amz-Expires",
                "X-Amz-SignedHeaders",
                "X-Amz-Security-Token",
                "X-Amz-Signature"
            ]
        );
        let map: BTreeMap<_, _> = params.iter().cloned().collect();
        assert_eq!(map["Action"], "GetCallerIdentity");
        assert_eq!(map["Version"], "2011-06-15");
        assert_eq!(map["X-Amz-Algorithm"], "AWS4-HMAC-SHA256");
        assert_eq!(
            map["X-Amz-Credential"],
            "AKIDEXAMPLE/20231114/eu-west-1/sts/aws4_request"
        );
        assert_eq!(map["X-Amz-Date"], "20231114T221320Z");
        assert_eq!(map["X-Amz-Expires"], "60");
        assert_eq!(map["X-Amz-SignedHeaders"], "host;x-k8s-aws-id");
        assert_eq!(map["X-Amz-Security-Token"], SESSION_TOKEN);
        assert_eq!(
            map["X-Amz-Signature"],
            expected_signature(&params, "sts.eu-west-1.amazonaws.com", "ctf-cluster", "eu-west-1")
        );
    }

    #[test]
    fn signature_changes_with_the_cluster_and_the_time() {
        let creds = credentials(None);
        let signature = |cluster: &str, secs: u64| {
            let url = decode(&eks_token(&creds, "us-east-1", cluster, at(secs)).unwrap());
            query(&url)
                .into_iter()
                .find(|(k, _)| k == SIGNATURE_PARAM)
                .map(|(_, v)| v)
                .unwrap()
        };
        let base = signature("ctf", SIGNED_AT);
        assert_ne!(base, signature("other", SIGNED_AT));
        assert_ne!(base, signature("ctf", SIGNED_AT + 1));
        assert_eq!(base, signature("ctf", SIGNED_AT));
    }

    #[test]
    fn long_term_keys_carry_no_session_token() {
        let url = decode(&eks_token(&credentials(None), "us-east-1", "ctf", at(SIGNED_AT)).unwrap());
        let params = query(&url);
        assert!(params.iter().all(|(k, _)| k != "X-Amz-Security-Token"), "{url}");
        let map: BTreeMap<_, _> = params.iter().cloned().collect();
        assert_eq!(
            map[SIGNATURE_PARAM],
            expected_signature(&params, "sts.us-east-1.amazonaws.com", "ctf", "us-east-1")
        );
    }

    #[test]
    fn china_regions_use_their_own_sts_domain() {
        assert_eq!(sts_host("cn-north-1"), "sts.cn-north-1.amazonaws.com.cn");
        let url = decode(&eks_token(&credentials(None), "cn-north-1", "ctf", at(SIGNED_AT)).unwrap());
        assert!(url.starts_with("https://sts.cn-north-1.amazonaws.com.cn/?"), "{url}");
    }

    #[test]
    fn uri_encoding_keeps_only_unreserved_characters() {
        let mut out = String::new();
        push_uri_encoded(&mut out, "aZ09-_.~ /+=;");
        assert_eq!(out, "aZ09-_.~%20%2F%2B%3D%3B");
    }
}
