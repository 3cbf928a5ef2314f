//! Typed configuration from environment variables, parsed once at init.
//!
//! Names and defaults follow the Go provisioner's where they apply (the HTTP contract's
//! configuration section; the README's table lists them all); every bad variable is reported
//! in one error.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use crate::deadlines::{CREATE_WORK_BUDGET, MAX_CREATE_QUEUE_WAIT, MAX_CREATE_WAIT};
use crate::kube_names::{is_dns_label, is_dns_subdomain};
use crate::model::Exposure;
use crate::tenancy::{KeyRing, Tenants};

mod hardening;
mod prepull;
mod validation;

#[cfg(test)]
pub(crate) use hardening::BASELINE_CAPABILITIES;
pub(crate) use hardening::{DropCapabilities, LINUX_CAPABILITIES, NodeTaint};
pub(crate) use prepull::PrepullPolicy;
pub use validation::ValidationPolicy;

/// `STACK_ON_UNSCHEDULABLE`: what a create does when the scheduler finds no node for the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnUnschedulable {
    /// Remove the pod and answer 503 (try later): for a fixed set of nodes.
    Fail,
    /// Keep the pod and answer 201 `creating`: a cluster autoscaler (Karpenter, Cluster
    /// Autoscaler) sees the pending pod and adds a node; `STACK_SCHEDULING_TIMEOUT` bounds it.
    Wait,
}

impl OnUnschedulable {
    /// `STACK_SCHEDULING_TIMEOUT`'s default: under `wait` it must cover a node start
    /// (Karpenter typically brings a node Ready in about a minute; EC2 capacity can take longer).
    fn default_scheduling_timeout(self) -> Duration {
        match self {
            OnUnschedulable::Fail => Duration::from_secs(20),
            OnUnschedulable::Wait => Duration::from_secs(300),
        }
    }
}

fn parse_on_unschedulable(v: &str) -> Result<OnUnschedulable, String> {
    match v.to_ascii_lowercase().as_str() {
        "fail" => Ok(OnUnschedulable::Fail),
        "wait" => Ok(OnUnschedulable::Wait),
        _ => Err("expected fail or wait".into()),
    }
}

/// What `STACK_START_TIMEOUT` allows beyond the scheduling timeout by default: the image
/// pull and the start. Operators report 80 s to pull a 3 GB image on a fresh node and minutes
/// for larger ones without pre-pulling; five minutes covers that without leaving a stack
/// that will never start `creating` for long.
pub(crate) const START_ALLOWANCE: Duration = Duration::from_secs(300);

/// Most `STACK_PROXY_SYNC` may be: kube-proxy's full resync period.
const MAX_PROXY_SYNC: Duration = Duration::from_secs(30);

/// Default of `STACK_CHALLENGE_LABEL`.
pub(crate) const DEFAULT_CHALLENGE_LABEL: &str = "challenge";

/// Everything both functions read from the environment.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// What the validator enforces, `STACK_NAMESPACE` and `STACK_NODE_ROLE` included.
    pub validation: ValidationPolicy,
    pub ttl: Duration,
    pub max_lifetime: Duration,
    /// How new stacks expose their ports; stacks of the other mode live on until they end.
    pub exposure: Exposure,
    /// The port range of both modes (`STACK_NODEPORT_MIN..=STACK_NODEPORT_MAX`).
    pub nodeport_min: u16,
    pub nodeport_max: u16,
    /// What a create does when no node can take the pod now.
    pub on_unschedulable: OnUnschedulable,
    /// How long a stack may stay unscheduled, from its creation.
    pub scheduling_timeout: Duration,
    /// How long a stack may take to become Ready, from its creation; past it, a stack not
    /// Ready is failed.
    pub start_timeout: Duration,
    /// How long a failed stack's record (its tombstone) stays readable.
    pub failed_retention: Duration,
    /// How long after its pod is Ready a node-port stack reads `running`: the time kube-proxy
    /// takes to program the Service's rules on the node.
    pub proxy_sync: Duration,
    /// How long a create waits for the scheduler and for the pod to be Ready before
    /// answering `creating`.
    pub create_wait: Duration,
    /// Creates one process works on at once; more wait for a slot.
    pub create_concurrency: usize,
    /// How long a create waits for a slot before it is refused with 503.
    pub create_queue_wait: Duration,
    /// What stacks may reach and what may reach them (`cluster/isolation.rs`).
    pub isolation: Isolation,
    /// Creates answer 503 while another NetworkPolicy widens the isolation.
    pub require_isolation: bool,
    pub table: String,
    pub consistent_read: bool,
    pub cluster: ClusterTarget,
    pub kube_qps: f32,
    pub kube_burst: u32,
    pub api_key_enabled: bool,
    /// `STACK_CREATE_RATE`: pods per second the control plane binds (the scheduler's API rate
    /// of the EKS control plane tier), for `POST /preflight`.
    pub create_rate: f64,
    /// `STACK_TENANTS`: the deployment's tenants and their limits.
    pub tenants: Tenants,
    /// `API_KEYS` and `API_KEY`: who each key is; empty unless `api_key_enabled`.
    pub keys: KeyRing,
    pub listen_addr: SocketAddr,
    pub orphan_grace: Duration,
    pub reap_terminated: bool,
    pub reconcile_concurrency: usize,
    /// Label of the platform's manifests the dashboard groups stacks by (one per challenge).
    pub challenge_label: String,
    /// What the pre-pull keeps on the stack nodes.
    pub prepull: PrepullPolicy,
}

/// Where the functions' cluster is: an EKS cluster by name, with token auth
/// (`EKS_CLUSTER_NAME`), else a kubeconfig (`K8S_KUBECONFIG`, else `KUBECONFIG` or
/// `~/.kube/config`) and its context (`K8S_CONTEXT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterTarget {
    pub eks_cluster_name: Option<String>,
    pub kubeconfig: Option<String>,
    pub context: Option<String>,
}

/// What stacks may reach and what may reach them, the operator's choices
/// (`STACK_EGRESS_INTERNET`, `STACK_DENY_EGRESS_CIDRS`, `STACK_ALLOW_INGRESS_CIDRS`); the
/// policy built from it: `cluster/isolation.rs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Isolation {
    /// Stacks may open connections to public addresses (challenges that fetch something).
    pub internet_egress: bool,
    /// Public CIDRs stacks may not reach either.
    pub deny_egress_cidrs: Vec<String>,
    /// Private CIDRs that may reach stacks besides the internet: an on-site network, a VPN.
    pub allow_ingress_cidrs: Vec<String>,
}

impl Default for Isolation {
    fn default() -> Self {
        Self {
            internet_egress: true,
            deny_egress_cidrs: Vec::new(),
            allow_ingress_cidrs: Vec::new(),
        }
    }
}

/// Label keys accepted by default: any (reserved domains stay refused by the validator). Labels
/// identify; the platform's own labels (e.g. a challenge label) must keep working untouched.
pub(crate) const DEFAULT_LABEL_ALLOWLIST: &[&str] = &["*", "*/*"];

/// Annotation keys accepted by default: keys without a prefix (private to the author by
/// Kubernetes convention; add-ons use prefixed keys), the recommended `app.kubernetes.io/*`
/// and kubectl's informational keys. Prefixed keys steer add-ons, hence an allowlist.
pub(crate) const DEFAULT_ANNOTATION_ALLOWLIST: &[&str] = &[
    "*",
    "app.kubernetes.io/*",
    "kubectl.kubernetes.io/default-container",
    "kubectl.kubernetes.io/default-logs-container",
    "kubectl.kubernetes.io/last-applied-configuration",
];

/// Most of each thing one stack pod may declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodLimits {
    /// `STACK_MAX_CONTAINERS`: regular containers.
    pub containers: usize,
    /// `STACK_MAX_INIT_CONTAINERS`: init containers, sidecars included.
    pub init_containers: usize,
    /// `STACK_MAX_VOLUMES`: volumes.
    pub volumes: usize,
    /// `STACK_MAX_ENV`: `env` and `envFrom` entries summed over every container.
    pub env: usize,
    /// `STACK_MAX_CONTAINER_PORTS`: `ports` entries summed over every container.
    pub ports: usize,
}

impl PodLimits {
    pub(crate) const DEFAULT: Self = Self {
        containers: 8,
        init_containers: 8,
        volumes: 32,
        env: 512,
        ports: 64,
    };
}

impl Default for PodLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Start-up failure naming every bad variable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid configuration: {}", .problems.join("; "))]
pub struct ConfigError {
    pub problems: Vec<String>,
}

impl Config {
    /// Reads the process environment, and warns of each variable that looks like a misspelt
    /// setting (it is ignored, as the setting's default is not).
    pub fn from_env() -> Result<Self, ConfigError> {
        let (config, settings) = Self::read(|name| std::env::var(name).ok());
        let present = std::env::vars_os().filter_map(|(name, _)| name.into_string().ok());
        for (variable, setting) in misspelt_settings(present, &settings) {
            tracing::warn!(%variable, %setting, "not a setting, ignored: a misspelling of the setting?");
        }
        config
    }

    /// Reads variables through `lookup`; blank values count as unset.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        Self::read(lookup).0
    }

    /// The name of every setting, for other crates' tests (e.g. that a deployment sets no other).
    #[cfg(any(test, feature = "test-fixtures"))]
    pub fn setting_names() -> BTreeSet<String> {
        Self::read(|_| None).1
    }

    /// The configuration, and the name of every setting (each one read, set or not).
    fn read(lookup: impl Fn(&str) -> Option<String>) -> (Result<Self, ConfigError>, BTreeSet<String>) {
        let mut env = Reader {
            lookup: &lookup,
            problems: Vec::new(),
            names: RefCell::default(),
        };
        let api_key_enabled = env.parse("API_KEY_ENABLED", true, parse_bool);
        let tenants = env.parse("STACK_TENANTS", Tenants::default(), Tenants::parse);
        let (api_keys, api_key) = (env.string("API_KEYS"), env.string("API_KEY"));
        // Required only by the API (see `require_api_key`): the reconciler needs no key.
        let keys = if api_key_enabled {
            KeyRing::parse(api_keys.as_deref(), api_key.as_deref(), &tenants).unwrap_or_else(|problems| {
                env.problems.extend(problems);
                KeyRing::default()
            })
        } else {
            KeyRing::default()
        };
        let on_unschedulable = env.parse("STACK_ON_UNSCHEDULABLE", OnUnschedulable::Fail, parse_on_unschedulable);
        let scheduling_timeout = env.parse(
            "STACK_SCHEDULING_TIMEOUT",
            on_unschedulable.default_scheduling_timeout(),
            parse_duration,
        );
        let max_lifetime = env.parse("STACK_MAX_LIFETIME", Duration::from_secs(8 * 3600), parse_duration);
        let config = Config {
            validation: ValidationPolicy::read(&mut env, max_lifetime),
            ttl: env.parse("STACK_TTL", Duration::from_secs(2 * 3600), parse_duration),
            max_lifetime,
            exposure: env.parse("STACK_EXPOSURE", Exposure::NodePort, |v| {
                Exposure::parse(v).ok_or_else(|| "expected nodeport or hostport".to_string())
            }),
            nodeport_min: env.parse("STACK_NODEPORT_MIN", 31001, parse_num),
            nodeport_max: env.parse("STACK_NODEPORT_MAX", 32767, parse_num),
            on_unschedulable,
            scheduling_timeout,
            start_timeout: env.parse(
                "STACK_START_TIMEOUT",
                scheduling_timeout.saturating_add(START_ALLOWANCE),
                parse_duration,
            ),
            // Long enough for a platform that polls a minute apart, or an operator, to read why
            // a stack failed; short enough that failed creates do not pile up in lists.
            failed_retention: env.parse("STACK_FAILED_RETENTION", Duration::from_secs(600), parse_duration),
            // kube-proxy's default iptables.minSyncPeriod: it applies an endpoint change at most
            // this long after the last sync; measured locally, 0.1-1.1 s after the pod is Ready.
            proxy_sync: env.parse("STACK_PROXY_SYNC", Duration::from_secs(1), parse_duration),
            create_wait: env.parse("STACK_CREATE_WAIT", Duration::from_millis(2000), parse_duration),
            create_concurrency: env.parse("STACK_CREATE_CONCURRENCY", 32, parse_at_least_one),
            // A 200-create burst on the local environment (bench-faults burst): 32 slots with 2 s of
            // queueing answered 84-92 creates, the slowest at 2.6 s; 1 s answered 55-65 (slowest
            // 1.5 s); 64 slots answered 101 but the slowest at 3.1 s, too near the 4 s deadline.
            create_queue_wait: env.parse("STACK_CREATE_QUEUE_WAIT", MAX_CREATE_QUEUE_WAIT, parse_duration),
            isolation: Isolation {
                internet_egress: env.parse("STACK_EGRESS_INTERNET", true, parse_bool),
                deny_egress_cidrs: env.parse("STACK_DENY_EGRESS_CIDRS", Vec::new(), parse_cidrs),
                allow_ingress_cidrs: env.parse("STACK_ALLOW_INGRESS_CIDRS", Vec::new(), parse_cidrs),
            },
            // The Go provisioner's switch refused creates without an ingress NetworkPolicy; ours
            // refuses them while the isolation is not in place: a deployment's `false` means the same.
            require_isolation: env.parse_renamed(
                "STACK_REQUIRE_ISOLATION",
                "STACK_REQUIRE_INGRESS_NETWORK_POLICY",
                true,
                parse_bool,
            ),
            table: env.string("DDB_STACK_TABLE").unwrap_or_else(|| "stacks".into()),
            consistent_read: env.parse("DDB_CONSISTENT_READ", true, parse_bool),
            cluster: ClusterTarget {
                eks_cluster_name: env.string("EKS_CLUSTER_NAME"),
                kubeconfig: env.string("K8S_KUBECONFIG"),
                context: env.string("K8S_CONTEXT"),
            },
            kube_qps: env.parse("K8S_CLIENT_QPS", 50.0, parse_positive_f32),
            kube_burst: env.parse("K8S_CLIENT_BURST", 100, parse_num),
            api_key_enabled,
            create_rate: f64::from(env.parse("STACK_CREATE_RATE", 50.0, parse_positive_f32)),
            tenants,
            keys,
            listen_addr: env.parse("LISTEN_ADDR", SocketAddr::from(([127, 0, 0, 1], 8081)), |v| {
                v.parse().map_err(|_| "expected host:port".to_string())
            }),
            orphan_grace: env.parse("STACK_ORPHAN_GRACE", Duration::from_secs(120), parse_duration),
            reap_terminated: env.parse("STACK_REAP_TERMINATED", false, parse_bool),
            reconcile_concurrency: env.parse("RECONCILE_CONCURRENCY", 16, parse_at_least_one),
            challenge_label: env
                .string("STACK_CHALLENGE_LABEL")
                .unwrap_or_else(|| DEFAULT_CHALLENGE_LABEL.into()),
            prepull: PrepullPolicy::read(&mut env),
        };
        let mut problems = env.problems;
        problems.extend(config.cross_checks());
        let config = if problems.is_empty() {
            Ok(config)
        } else {
            Err(ConfigError { problems })
        };
        (config, env.names.into_inner())
    }

    fn cross_checks(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.nodeport_min > self.nodeport_max {
            problems.push("STACK_NODEPORT_MIN: must not exceed STACK_NODEPORT_MAX".into());
        }
        if self.nodeport_min < 1 {
            problems.push("STACK_NODEPORT_MIN: must be at least 1".into());
        }
        if self.ttl.is_zero() {
            problems.push("STACK_TTL: must be positive".into());
        }
        if self.max_lifetime.is_zero() {
            problems.push("STACK_MAX_LIFETIME: must be positive".into());
        }
        if self.ttl > self.max_lifetime {
            problems.push("STACK_TTL: must not exceed STACK_MAX_LIFETIME".into());
        }
        if self.create_wait > MAX_CREATE_WAIT {
            problems.push(format!(
                "STACK_CREATE_WAIT: must be at most {} ms (a create answers within {} ms)",
                MAX_CREATE_WAIT.as_millis(),
                CREATE_WORK_BUDGET.as_millis()
            ));
        }
        if self.create_queue_wait > MAX_CREATE_QUEUE_WAIT {
            problems.push(format!(
                "STACK_CREATE_QUEUE_WAIT: must be at most {} ms (a create answers within {} ms)",
                MAX_CREATE_QUEUE_WAIT.as_millis(),
                CREATE_WORK_BUDGET.as_millis()
            ));
        }
        if self.proxy_sync > MAX_PROXY_SYNC {
            problems.push(format!(
                "STACK_PROXY_SYNC: must be at most {} (kube-proxy syncs at least every 30 s)",
                format_duration(MAX_PROXY_SYNC)
            ));
        }
        if let Some(class) = &self.validation.runtime_class
            && !is_dns_subdomain(class)
        {
            problems.push(format!(
                "STACK_RUNTIME_CLASS: must name a RuntimeClass (a DNS subdomain), got {class:?}"
            ));
        }
        if self.start_timeout < self.scheduling_timeout {
            problems.push(format!(
                "STACK_START_TIMEOUT: must be at least STACK_SCHEDULING_TIMEOUT ({}), so that a stack not \
                 yet scheduled is removed, not failed",
                format_duration(self.scheduling_timeout)
            ));
        }
        if self.validation.namespace.len() > 63 || !is_dns_label(&self.validation.namespace) {
            problems.push("STACK_NAMESPACE: must be a DNS label".into());
        }
        if self.prepull.namespace.len() > 63 || !is_dns_label(&self.prepull.namespace) {
            problems.push("STACK_PREPULL_NAMESPACE: must be a DNS label".into());
        }
        if self.prepull.namespace == self.validation.namespace {
            problems.push("STACK_PREPULL_NAMESPACE: must differ from STACK_NAMESPACE (its pods are not stacks)".into());
        }
        problems
    }

    /// The API refuses to start without a key while keys are enabled (the reconciler needs none).
    pub fn require_api_key(&self) -> Result<(), ConfigError> {
        if self.api_key_enabled && self.keys.is_empty() {
            return Err(ConfigError {
                problems: vec!["API_KEYS or API_KEY: required when API_KEY_ENABLED is true".into()],
            });
        }
        Ok(())
    }
}

struct Reader<'a, F: Fn(&str) -> Option<String>> {
    lookup: &'a F,
    problems: Vec<String>,
    /// Every name read: the settings there are.
    names: RefCell<BTreeSet<String>>,
}

impl<F: Fn(&str) -> Option<String>> Reader<'_, F> {
    fn string(&self, name: &str) -> Option<String> {
        self.names.borrow_mut().insert(name.to_owned());
        (self.lookup)(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }

    fn parse<T>(&mut self, name: &str, default: T, parse: impl Fn(&str) -> Result<T, String>) -> T {
        self.parse_opt(name, parse).unwrap_or(default)
    }

    /// A setting that a deployment of the Go provisioner sets under `old_name`: read under
    /// either name; both set and disagreeing is a problem, not a silent choice.
    fn parse_renamed<T: PartialEq>(
        &mut self,
        name: &str,
        old_name: &str,
        default: T,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> T {
        let current = self.parse_opt(name, &parse);
        let old = self.parse_opt(old_name, &parse);
        match (current, old) {
            (Some(current), Some(old)) if current != old => {
                self.problems.push(format!(
                    "{old_name}: the older name of {name}, which is set otherwise; set one"
                ));
                current
            }
            (current, old) => current.or(old).unwrap_or(default),
        }
    }

    /// A comma-separated list (`a, b,c`), if set.
    fn list(&self, name: &str) -> Option<Vec<String>> {
        self.string(name).map(|v| split_list(&v))
    }

    fn parse_opt<T>(&mut self, name: &str, parse: impl Fn(&str) -> Result<T, String>) -> Option<T> {
        let raw = self.string(name)?;
        match parse(&raw) {
            Ok(v) => Some(v),
            Err(why) => {
                self.problems.push(format!("{name}: {why} (got {raw:?})"));
                None
            }
        }
    }
}

/// The variables of `present` that are not settings but one or two keystrokes from one, or
/// one in other case (`STACK_TLL`, `stack_ttl`), each with that setting.
fn misspelt_settings(present: impl IntoIterator<Item = String>, settings: &BTreeSet<String>) -> Vec<(String, String)> {
    const MAX_EDITS: usize = 2;
    present
        .into_iter()
        .filter(|name| !settings.contains(name))
        .filter_map(|name| {
            let upper = name.to_ascii_uppercase();
            // Only names of about the same length can be that close; a slip is rarely in the
            // first letter. Both keep start-up fast among Lambda's own variables.
            let (edits, setting) = settings
                .iter()
                .filter(|setting| setting.len().abs_diff(upper.len()) <= MAX_EDITS)
                .filter(|setting| setting.as_bytes().first() == upper.as_bytes().first())
                .map(|setting| (strsim::osa_distance(&upper, setting), setting))
                .min()?;
            (edits <= MAX_EDITS).then(|| (name, setting.clone()))
        })
        .collect()
}

fn parse_bool(v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "t" | "true" | "yes" | "on" => Ok(true),
        "0" | "f" | "false" | "no" | "off" => Ok(false),
        _ => Err("expected true or false".into()),
    }
}

fn parse_num<T: std::str::FromStr>(v: &str) -> Result<T, String> {
    v.parse().map_err(|_| "expected a whole number in range".to_string())
}

fn parse_at_least_one(v: &str) -> Result<usize, String> {
    match parse_num::<usize>(v)? {
        0 => Err("must be at least 1".into()),
        n => Ok(n),
    }
}

fn parse_positive(v: &str) -> Result<i64, String> {
    match v.parse::<i64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err("expected a positive whole number".into()),
    }
}

fn parse_positive_f32(v: &str) -> Result<f32, String> {
    match v.parse::<f32>() {
        Ok(n) if n.is_finite() && n > 0.0 => Ok(n),
        _ => Err("expected a positive number".into()),
    }
}

/// Go-style durations: `90s`, `2h`, `1h30m`, `500ms`, `1.5h`.
pub(crate) fn parse_duration(v: &str) -> Result<Duration, String> {
    const BAD: &str = "expected a duration like 90s, 2h or 1h30m";
    let v = v.trim();
    if v == "0" {
        return Ok(Duration::ZERO);
    }
    // Go's syntax only (no spaces, no ISO 8601, no long unit names), read by jiff.
    if !v.chars().all(|c| c.is_ascii_digit() || ".nsuµmh".contains(c)) {
        return Err(BAD.into());
    }
    let parsed: jiff::SignedDuration = v.parse().map_err(|_| BAD)?;
    Duration::try_from(parsed).map_err(|_| BAD.into())
}

/// A duration as [`parse_duration`] reads it back: `5m20s`, `2h`, `90s`, `500ms`, `0s`.
pub(crate) fn format_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs == 0 {
        return format!("{}ms", d.subsec_millis());
    }
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut text = String::new();
    for (value, unit) in [(h, "h"), (m, "m"), (s, "s")] {
        if value > 0 {
            text.push_str(&format!("{value}{unit}"));
        }
    }
    text
}

fn to_strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn split_list(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn parse_cidrs(v: &str) -> Result<Vec<String>, String> {
    let cidrs = split_list(v);
    for cidr in &cidrs {
        let (addr, len) = cidr.split_once('/').ok_or_else(|| format!("{cidr} is not a CIDR"))?;
        let max = match addr.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(_)) => 32,
            Ok(std::net::IpAddr::V6(_)) => 128,
            Err(_) => return Err(format!("{cidr} is not a CIDR")),
        };
        if !len.parse::<u8>().is_ok_and(|l| l <= max) {
            return Err(format!("{cidr} is not a CIDR"));
        }
    }
    Ok(cidrs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_lookup(|name| map.get(name).cloned())
    }

    /// [`config`] of `vars` and a key, which every deployment has.
    fn with_key(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        config(&[&[("API_KEY", "k")], vars].concat())
    }

    /// Asserts that `vars` (with a key) are refused with one problem for each of `names`, all
    /// reported at once, each naming its variable; returns the refusal for closer looks.
    fn assert_refused(vars: &[(&str, &str)], names: &[&str]) -> ConfigError {
        let err = with_key(vars).unwrap_err();
        assert_eq!(err.problems.len(), names.len(), "{err}");
        let text = err.to_string();
        for name in names {
            assert!(text.contains(name), "{name} missing from {text}");
        }
        err
    }

    #[test]
    fn defaults_follow_the_contract() {
        let c = with_key(&[]).unwrap();
        assert_eq!(c.validation.namespace, "stacks");
        assert_eq!(c.ttl, Duration::from_secs(7200));
        assert_eq!(c.max_lifetime, Duration::from_secs(8 * 3600));
        assert_eq!((c.nodeport_min, c.nodeport_max), (31001, 32767));
        // Drop-in compatible: today's platforms and RBAC manifests keep working unchanged.
        assert_eq!(c.exposure, Exposure::NodePort);
        assert_eq!(c.validation.node_role, "stack");
        assert_eq!(c.scheduling_timeout, Duration::from_secs(20));
        assert!(c.require_isolation);
        assert_eq!(c.isolation, Isolation::default());
        assert!(c.consistent_read);
        assert_eq!(c.keys.identify("k").map(|p| p.role), Some(crate::tenancy::Role::Owner));
        assert_eq!(c.listen_addr.to_string(), "127.0.0.1:8081");
        assert_eq!(c.orphan_grace, Duration::from_secs(120));
        assert_eq!(c.reconcile_concurrency, 16);
        assert_eq!(c.validation.ephemeral_storage_limit, 1 << 30);
        assert!(
            c.validation.shared_config_maps.is_empty()
                && c.validation.shared_secrets.is_empty()
                && c.validation.image_pull_secrets.is_empty()
        );
        assert_eq!(c.validation.pod_limits, PodLimits::DEFAULT);
        assert_eq!(
            c.validation.annotation_allowlist,
            to_strings(DEFAULT_ANNOTATION_ALLOWLIST)
        );
    }

    #[test]
    fn a_misspelt_setting_is_named_with_the_setting_it_misses() {
        let (_, settings) = Config::read(|_| None);
        let present = [
            "STACK_TLL",
            "stack_namespace",
            "STACK_REQUIRE_ISOLATON",
            "STACK_NODEPORTMIN",
            // Settings, and what is not near one: the local environment's, AWS's, Lambda's.
            "STACK_TTL",
            "STACK_ENV_REGISTRY",
            "AWS_REGION",
            "AWS_LAMBDA_FUNCTION_NAME",
            "PATH",
        ];
        assert_eq!(
            misspelt_settings(present.map(String::from), &settings),
            [
                ("STACK_TLL", "STACK_TTL"),
                ("stack_namespace", "STACK_NAMESPACE"),
                ("STACK_REQUIRE_ISOLATON", "STACK_REQUIRE_ISOLATION"),
                ("STACK_NODEPORTMIN", "STACK_NODEPORT_MIN"),
            ]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
        );
    }

    #[test]
    fn every_setting_counts_as_one_whatever_the_others_say() {
        // Keys are not used with the key check off, but still settings, not typos.
        let (_, settings) = Config::read(|name| (name == "API_KEY_ENABLED").then(|| "false".to_owned()));
        for name in [
            "API_KEYS",
            "API_KEY",
            "STACK_REQUIRE_INGRESS_NETWORK_POLICY",
            "STACK_MAX_ENV",
            "STACK_PREPULL_KEEP",
            "EKS_CLUSTER_NAME",
        ] {
            assert!(settings.contains(name), "{name}");
        }
    }

    #[test]
    fn the_go_provisioners_name_of_the_isolation_switch_is_read() {
        let old = with_key(&[("STACK_REQUIRE_INGRESS_NETWORK_POLICY", "false")]).unwrap();
        assert!(!old.require_isolation);
        let both = with_key(&[
            ("STACK_REQUIRE_INGRESS_NETWORK_POLICY", "false"),
            ("STACK_REQUIRE_ISOLATION", "false"),
        ])
        .unwrap();
        assert!(!both.require_isolation);
        assert!(
            with_key(&[("STACK_REQUIRE_ISOLATION", "true")])
                .unwrap()
                .require_isolation
        );
        assert_refused(
            &[
                ("STACK_REQUIRE_INGRESS_NETWORK_POLICY", "false"),
                ("STACK_REQUIRE_ISOLATION", "true"),
            ],
            &["STACK_REQUIRE_INGRESS_NETWORK_POLICY: the older name of STACK_REQUIRE_ISOLATION"],
        );
        assert_refused(
            &[("STACK_REQUIRE_INGRESS_NETWORK_POLICY", "sometimes")],
            &["STACK_REQUIRE_INGRESS_NETWORK_POLICY: expected true or false"],
        );
    }

    #[test]
    fn exposure_is_nodeport_or_hostport() {
        let c = with_key(&[("STACK_EXPOSURE", "HostPort")]).unwrap();
        assert_eq!(c.exposure, Exposure::HostPort);
        let err = with_key(&[("STACK_EXPOSURE", "ingress")]).unwrap_err();
        assert!(
            err.to_string()
                .contains("STACK_EXPOSURE: expected nodeport or hostport"),
            "{err}"
        );
    }

    #[test]
    fn waiting_for_a_node_gets_a_scheduling_timeout_that_covers_a_node_start() {
        let fail = with_key(&[]).unwrap();
        assert_eq!(fail.on_unschedulable, OnUnschedulable::Fail);
        assert_eq!(fail.scheduling_timeout, Duration::from_secs(20));
        let wait = with_key(&[("STACK_ON_UNSCHEDULABLE", "wait")]).unwrap();
        assert_eq!(wait.on_unschedulable, OnUnschedulable::Wait);
        assert_eq!(wait.scheduling_timeout, Duration::from_secs(300));
        let set = with_key(&[("STACK_ON_UNSCHEDULABLE", "WAIT"), ("STACK_SCHEDULING_TIMEOUT", "90s")]).unwrap();
        assert_eq!(set.scheduling_timeout, Duration::from_secs(90));
        assert_refused(&[("STACK_ON_UNSCHEDULABLE", "queue")], &["STACK_ON_UNSCHEDULABLE"]);
    }

    #[test]
    fn the_runtime_class_is_optional_and_must_name_a_runtime_class() {
        assert_eq!(with_key(&[]).unwrap().validation.runtime_class, None);
        let gvisor = with_key(&[("STACK_RUNTIME_CLASS", "gvisor")]).unwrap();
        assert_eq!(gvisor.validation.runtime_class.as_deref(), Some("gvisor"));
        let dotted = with_key(&[("STACK_RUNTIME_CLASS", "sandbox.example.com")]).unwrap();
        assert_eq!(dotted.validation.runtime_class.as_deref(), Some("sandbox.example.com"));
        assert_refused(&[("STACK_RUNTIME_CLASS", "gVisor Sandbox")], &["STACK_RUNTIME_CLASS"]);
    }

    #[test]
    fn hardening_settings_default_to_dropping_net_raw_on_shared_nodes() {
        let c = with_key(&[]).unwrap();
        assert_eq!(c.validation.drop_capabilities, DropCapabilities::NetRaw);
        assert_eq!(c.validation.add_back_capabilities, to_strings(BASELINE_CAPABILITIES));
        assert_eq!(c.validation.node_taint, None);
        let strict = with_key(&[
            ("STACK_DROP_CAPABILITIES", "all"),
            ("STACK_ADD_BACK_CAPABILITIES", "CHOWN,SETUID,SETGID"),
            ("STACK_NODE_TAINT", "example.com/stacks=ctf:NoSchedule"),
        ])
        .unwrap();
        assert_eq!(strict.validation.drop_capabilities, DropCapabilities::All);
        assert_eq!(strict.validation.add_back_capabilities, ["CHOWN", "SETUID", "SETGID"]);
        assert_eq!(
            strict.validation.node_taint.map(|t| t.key).as_deref(),
            Some("example.com/stacks")
        );
        assert_refused(
            &[
                ("STACK_DROP_CAPABILITIES", "some"),
                ("STACK_ADD_BACK_CAPABILITIES", "SYS_ADMIN"),
                ("STACK_NODE_TAINT", "stacks"),
            ],
            &[
                "STACK_DROP_CAPABILITIES",
                "STACK_ADD_BACK_CAPABILITIES",
                "STACK_NODE_TAINT",
            ],
        );
    }

    #[test]
    fn proxy_sync_defaults_to_kube_proxys_min_sync_period_and_is_bounded() {
        assert_eq!(with_key(&[]).unwrap().proxy_sync, Duration::from_secs(1));
        let none = with_key(&[("STACK_PROXY_SYNC", "0s")]).unwrap();
        assert_eq!(none.proxy_sync, Duration::ZERO);
        assert_refused(&[("STACK_PROXY_SYNC", "1m")], &["STACK_PROXY_SYNC"]);
    }

    #[test]
    fn start_timeout_and_failed_retention_have_defaults_and_bounds() {
        let c = with_key(&[]).unwrap();
        // The scheduler's 20 s, then five minutes to pull and start.
        assert_eq!(c.start_timeout, Duration::from_secs(320));
        assert_eq!(c.failed_retention, Duration::from_secs(600));
        let wait = with_key(&[("STACK_ON_UNSCHEDULABLE", "wait")]).unwrap();
        assert_eq!(wait.start_timeout, Duration::from_secs(600));
        let slow_scheduler = with_key(&[("STACK_SCHEDULING_TIMEOUT", "10m")]).unwrap();
        assert_eq!(slow_scheduler.start_timeout, Duration::from_secs(900));
        let set = with_key(&[("STACK_START_TIMEOUT", "2m"), ("STACK_FAILED_RETENTION", "1h")]).unwrap();
        assert_eq!(
            (set.start_timeout, set.failed_retention),
            (Duration::from_secs(120), Duration::from_secs(3600))
        );
        assert_eq!(
            with_key(&[("STACK_FAILED_RETENTION", "0")]).unwrap().failed_retention,
            Duration::ZERO
        );
        let short = with_key(&[("STACK_START_TIMEOUT", "10s")]).unwrap_err();
        assert_eq!(
            short.problems,
            [
                "STACK_START_TIMEOUT: must be at least STACK_SCHEDULING_TIMEOUT (20s), so that a stack not yet \
                 scheduled is removed, not failed"
            ]
        );
        let bad = assert_refused(
            &[("STACK_START_TIMEOUT", "soon"), ("STACK_FAILED_RETENTION", "-1m")],
            &["STACK_START_TIMEOUT", "STACK_FAILED_RETENTION"],
        );
        assert!(
            bad.problems[0].starts_with("STACK_START_TIMEOUT: expected a duration"),
            "{bad}"
        );
        assert!(
            bad.problems[1].starts_with("STACK_FAILED_RETENTION: expected a duration"),
            "{bad}"
        );
    }

    #[test]
    fn durations_format_as_they_parse() {
        for (d, text) in [
            (Duration::from_secs(320), "5m20s"),
            (Duration::from_secs(7200), "2h"),
            (Duration::from_secs(5400), "1h30m"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_millis(500), "500ms"),
            (Duration::ZERO, "0ms"),
        ] {
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration(text), Ok(d), "{text}");
        }
    }

    #[test]
    fn sharing_lists_and_pod_limits_are_read() {
        let c = with_key(&[
            ("STACK_SHARED_CONFIGMAPS", "web-cfg, scripts"),
            ("STACK_SHARED_SECRETS", "flag"),
            ("STACK_IMAGE_PULL_SECRETS", "regcred"),
            ("STACK_ANNOTATION_ALLOWLIST", "ctf.example.com/*"),
            ("STACK_MAX_CONTAINERS", "3"),
            ("STACK_MAX_ENV", "10"),
        ])
        .unwrap();
        assert_eq!(c.validation.shared_config_maps, ["web-cfg", "scripts"]);
        assert_eq!(c.validation.shared_secrets, ["flag"]);
        assert_eq!(c.validation.image_pull_secrets, ["regcred"]);
        assert_eq!(c.validation.annotation_allowlist, ["ctf.example.com/*"]);
        assert_eq!(
            (
                c.validation.pod_limits.containers,
                c.validation.pod_limits.env,
                c.validation.pod_limits.volumes
            ),
            (3, 10, 32)
        );
        assert_refused(&[("STACK_MAX_VOLUMES", "0")], &["STACK_MAX_VOLUMES"]);
    }

    #[test]
    fn every_bad_variable_is_listed_at_once() {
        assert_refused(
            &[
                ("STACK_TTL", "forever"),
                ("STACK_NODEPORT_MIN", "70000"),
                ("DDB_CONSISTENT_READ", "maybe"),
                ("STACK_DENY_EGRESS_CIDRS", "10.0.0.0/8, nonsense"),
            ],
            &[
                "STACK_TTL",
                "STACK_NODEPORT_MIN",
                "DDB_CONSISTENT_READ",
                "STACK_DENY_EGRESS_CIDRS",
            ],
        );
    }

    #[test]
    fn api_key_required_only_while_enabled() {
        let c = config(&[("API_KEY_ENABLED", "false"), ("API_KEY", "ignored")]).unwrap();
        assert!(c.keys.is_empty());
        assert_eq!(c.require_api_key(), Ok(()));
        let missing = config(&[]).unwrap().require_api_key().unwrap_err();
        assert!(missing.to_string().contains("API_KEY"), "{missing}");
    }

    #[test]
    fn cross_field_rules() {
        let err = assert_refused(
            &[
                ("STACK_NODEPORT_MIN", "32000"),
                ("STACK_NODEPORT_MAX", "31000"),
                ("STACK_TTL", "9h"),
                ("STACK_CREATE_WAIT", "3s"),
            ],
            &["STACK_NODEPORT_MIN", "STACK_TTL", "STACK_CREATE_WAIT"],
        );
        assert!(
            err.to_string().contains("STACK_CREATE_WAIT: must be at most 2500 ms"),
            "{err}"
        );
        assert!(with_key(&[("STACK_CREATE_WAIT", "2500ms")]).is_ok());
    }

    #[test]
    fn a_create_cannot_queue_past_its_budget() {
        let err = with_key(&[("STACK_CREATE_QUEUE_WAIT", "2500ms")]).unwrap_err();
        assert!(
            err.to_string()
                .contains("STACK_CREATE_QUEUE_WAIT: must be at most 2000 ms"),
            "{err}"
        );
        let err = with_key(&[("STACK_CREATE_CONCURRENCY", "0")]).unwrap_err();
        assert!(
            err.to_string().contains("STACK_CREATE_CONCURRENCY: must be at least 1"),
            "{err}"
        );
        let ok = with_key(&[("STACK_CREATE_QUEUE_WAIT", "2s")]).unwrap();
        assert_eq!(ok.create_queue_wait, Duration::from_secs(2));
        assert_eq!(ok.create_concurrency, 32);
    }

    #[test]
    fn go_style_durations() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1µs"), Ok(Duration::from_micros(1)));
        for bad in ["", "h", "10", "10x", "-5s", "1h 30m", "PT1H", "1hour", "1h1h", "5s2m"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
