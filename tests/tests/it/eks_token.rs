//! The EKS token equals the one botocore (what `aws eks get-token` runs) makes for the same
//! credentials, region, cluster and time.
//!
//! Needs the Python venv: run `tests/env/python/install` first.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, SystemTime};

use stack_core::{Credentials, eks_presigned_url, eks_token};

struct Case {
    access_key: &'static str,
    secret_key: &'static str,
    session_token: Option<&'static str>,
    region: &'static str,
    cluster: &'static str,
    unix_seconds: u64,
}

const CASES: &[Case] = &[
    Case {
        access_key: "AKIDEXAMPLE",
        secret_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        session_token: Some("FQoGZXIvYXdzE+/x=Session/Token+With==Padding"),
        region: "eu-west-1",
        cluster: "ctf-cluster",
        unix_seconds: 1_700_000_000,
    },
    Case {
        access_key: "ASIAIOSFODNN7EXAMPLE",
        secret_key: "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY",
        session_token: None,
        region: "us-east-1",
        cluster: "Prod_Stacks-2",
        unix_seconds: 1_767_225_599,
    },
    Case {
        access_key: "AKIAI44QH8DHBEXAMPLE",
        secret_key: "short",
        session_token: Some("IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQ=="),
        region: "cn-north-1",
        cluster: "c",
        unix_seconds: 946_684_800,
    },
];

fn venv_python() -> PathBuf {
    let cache = std::env::var_os("STACK_ENV_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").expect("HOME is set");
            PathBuf::from(home).join(".cache/stack-provisioner")
        });
    let python = cache.join("venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run tests/env/python/install to create the venv with the pinned botocore",
        python.display()
    );
    python
}

/// The token botocore's `signer` ("python" or "crt") makes for `case`, and the URL in it.
fn botocore_token(signer: &str, case: &Case) -> (String, String) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("env/python/eks_token.py");
    let output = Command::new(venv_python())
        .arg(script)
        .args([
            signer,
            case.access_key,
            case.secret_key,
            case.session_token.unwrap_or("-"),
            case.region,
            case.cluster,
        ])
        .arg(case.unix_seconds.to_string())
        // Nothing from this machine's AWS setup may leak into the reference.
        .env_clear()
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .output()
        .expect("running the venv's python");
    assert!(
        output.status.success(),
        "eks_token.py {signer} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).expect("utf-8");
    let mut lines = stdout.lines();
    match (lines.next(), lines.next()) {
        (Some(token), Some(url)) => (token.to_owned(), url.to_owned()),
        _ => panic!("eks_token.py printed {stdout:?}, expected a token and a URL"),
    }
}

fn credentials(case: &Case) -> Credentials {
    Credentials::new(
        case.access_key,
        case.secret_key,
        case.session_token.map(str::to_owned),
        None,
        "test",
    )
}

fn time(case: &Case) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(case.unix_seconds)
}

/// A URL split into its base and its raw `name=value` query parameters.
fn split_url(url: &str) -> (String, Vec<String>) {
    let (base, query) = url.split_once('?').expect("query");
    (base.to_owned(), query.split('&').map(str::to_owned).collect())
}

#[test]
fn token_is_byte_for_byte_botocores() {
    for case in CASES {
        let ours = eks_token(&credentials(case), case.region, case.cluster, time(case)).expect("token");
        let (theirs, their_url) = botocore_token("python", case);
        let our_url = eks_presigned_url(&credentials(case), case.region, case.cluster, time(case)).expect("url");
        assert_eq!(our_url, their_url, "region {} cluster {}", case.region, case.cluster);
        assert_eq!(ours, theirs, "region {} cluster {}", case.region, case.cluster);
    }
}

/// The CRT signer (botocore's choice when awscrt is installed, as in the AWS CLI v2) orders
/// `X-Amz-SignedHeaders` before `X-Amz-Expires`; order carries no meaning in a query string,
/// so the parameters are compared as sets. The signature itself must be identical.
#[test]
fn token_has_the_same_fields_as_the_crt_signers() {
    for case in CASES {
        let (_, their_url) = botocore_token("crt", case);
        let our_url = eks_presigned_url(&credentials(case), case.region, case.cluster, time(case)).expect("url");
        let (our_base, mut ours) = split_url(&our_url);
        let (their_base, mut theirs) = split_url(&their_url);
        assert_eq!(our_base, their_base);
        ours.sort();
        theirs.sort();
        assert_eq!(ours, theirs, "region {} cluster {}", case.region, case.cluster);
    }
}
