//! Where the local environment is: the variables of `tests/env/.state/env.sh`, taken from the
//! process environment or, when a test runs without them, read from that file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::EnvError;

const DYNAMODB_ENDPOINT: &str = "AWS_ENDPOINT_URL_DYNAMODB";

/// Connection settings of the local environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvSettings {
    pub kubeconfig: PathBuf,
    pub dynamodb: DynamoDbLocal,
    /// The table `up` created for the API (tests make their own).
    pub table: String,
    /// Where `up` keeps pid files and logs (to stop and continue a component in fault tests).
    pub state_dir: Option<PathBuf>,
    /// `host:port` of the registry the real nodes pull from (`images/README.md`), if any.
    pub registry: Option<String>,
    /// `host:port` where a benchmark may serve that registry slowly: the nodes pull from it over
    /// plain HTTP (`stack_tests::throttled_registry` listens there), if any.
    pub slow_registry: Option<String>,
    /// How many real nodes (`role=stack`) `up` started.
    pub real_nodes: usize,
    /// A public address of this machine the real nodes' pods reach as the internet, if any.
    pub internet_host: Option<String>,
}

/// DynamoDB Local as `up` runs it: its endpoint, and the region and static dummy credentials a
/// client signs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamoDbLocal {
    pub endpoint: String,
    pub region: String,
    pub access_key_id: String,
    pub secret_access_key: String,
}

impl EnvSettings {
    /// From the process environment when `env.sh` was sourced, else from `env.sh` itself.
    ///
    /// Mixing is deliberate neither way: with `AWS_ENDPOINT_URL_DYNAMODB` set the process
    /// environment wins entirely, so a test never talks to a half-local setup.
    pub fn load() -> Result<Self, EnvError> {
        if std::env::var_os(DYNAMODB_ENDPOINT).is_some() {
            return Self::from_lookup(|name| std::env::var(name).ok());
        }
        let path = env_file_path();
        let text = std::fs::read_to_string(&path).map_err(|_| {
            EnvError::NotConfigured(format!(
                "{DYNAMODB_ENDPOINT} is not set and {} does not exist",
                path.display()
            ))
        })?;
        let vars = parse_env_file(&text);
        Self::from_lookup(|name| vars.get(name).cloned())
    }

    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, EnvError> {
        // A blank variable counts as unset.
        let optional = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let required = |name: &str| optional(name).ok_or_else(|| EnvError::NotConfigured(format!("{name} is not set")));
        Ok(Self {
            kubeconfig: PathBuf::from(required("KUBECONFIG")?),
            dynamodb: DynamoDbLocal {
                endpoint: required(DYNAMODB_ENDPOINT)?,
                region: required("AWS_REGION")?,
                access_key_id: required("AWS_ACCESS_KEY_ID")?,
                secret_access_key: required("AWS_SECRET_ACCESS_KEY")?,
            },
            table: optional("DDB_STACK_TABLE").unwrap_or_else(|| "stacks".to_owned()),
            state_dir: optional("STACK_ENV_STATE_DIR").map(PathBuf::from),
            registry: optional("STACK_ENV_REGISTRY"),
            slow_registry: optional("STACK_ENV_SLOW_REGISTRY"),
            real_nodes: lookup("STACK_ENV_REAL_NODES")
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0),
            internet_host: optional("STACK_ENV_INTERNET_HOST"),
        })
    }
}

/// `tests/env/.state/env.sh` of this checkout.
pub fn env_file_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("env/.state/env.sh")
}

/// The `export NAME='value'` lines `up` writes (single, double or no quotes).
pub fn parse_env_file(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("export "))
        .filter_map(|assignment| assignment.split_once('='))
        .map(|(name, value)| (name.trim().to_owned(), unquote(value.trim()).to_owned()))
        .collect()
}

fn unquote(value: &str) -> &str {
    ['\'', '"']
        .iter()
        .find_map(|q| value.strip_prefix(*q).and_then(|v| v.strip_suffix(*q)))
        .unwrap_or(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENV_SH: &str = "# Written by tests/env/up\n\
        export KUBECONFIG='/w/tests/env/.state/kubeconfig'\n\
        export AWS_ENDPOINT_URL_DYNAMODB=\"http://127.0.0.1:40123\"\n\
        export AWS_REGION=us-east-1\n\
        export AWS_ACCESS_KEY_ID='local'\n\
        export AWS_SECRET_ACCESS_KEY='local'\n\
        export DDB_STACK_TABLE='stacks'\n";

    #[test]
    fn reads_the_file_up_writes() {
        let vars = parse_env_file(ENV_SH);
        let settings = EnvSettings::from_lookup(|n| vars.get(n).cloned()).expect("complete settings");
        assert_eq!(settings.kubeconfig, PathBuf::from("/w/tests/env/.state/kubeconfig"));
        assert_eq!(settings.dynamodb.endpoint, "http://127.0.0.1:40123");
        assert_eq!(settings.dynamodb.region, "us-east-1");
        assert_eq!(settings.table, "stacks");
    }

    #[test]
    fn a_missing_variable_tells_to_run_up() {
        let vars = parse_env_file("export KUBECONFIG=/k\n");
        let error = EnvSettings::from_lookup(|n| vars.get(n).cloned()).expect_err("endpoint missing");
        let message = error.to_string();
        assert!(message.contains("AWS_ENDPOINT_URL_DYNAMODB"), "{message}");
        assert!(message.contains("tests/env/up"), "{message}");
    }
}
