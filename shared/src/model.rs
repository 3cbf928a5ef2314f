//! Domain types shared by the API, the store and the reconciler.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::tenancy::{Scope, TenantId};

/// Label every object we create carries; the reconciler only ever deletes objects with it.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "stack-provisioner";
/// Label naming the stack an object belongs to; the Service selects its pod by it.
pub const STACK_ID_LABEL: &str = "stack-provisioner/stack-id";
/// The startup taint (`NoSchedule`) of a stack node that joins without the declared images:
/// stacks stay off it until the pre-pull has put every image there and removed the taint.
pub const STARTUP_TAINT: &str = "stack-provisioner.io/images-pending";
/// The init container that holds a stack back until its isolation is enforced
/// (`STACK_ISOLATION_CHECK_IMAGE`, `validate/isolation_check.rs`).
pub(crate) const ISOLATION_CHECK_CONTAINER: &str = "stack-isolation-check";
/// Prefix of our own label/annotation keys; input manifests may not use it.
pub const OWN_LABEL_PREFIX: &str = "stack-provisioner/";
/// Annotation of a hostport stack's pod listing its host ports (`31001,31002`), so that port
/// use can be read from a metadata-only pod list.
pub(crate) const HOST_PORTS_ANNOTATION: &str = "stack-provisioner/host-ports";

/// How participants reach a stack (`STACK_EXPOSURE`). Either way they connect to
/// `node_public_ip:node_port`; what differs is who holds the port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Exposure {
    /// A NodePort Service: the port is taken on every node, so the range holds one stack per
    /// port cluster-wide.
    #[default]
    NodePort,
    /// A `hostPort` on the pod, no Service: the port is taken on the pod's node only, so the
    /// range holds one stack per port per node.
    HostPort,
}

impl Exposure {
    pub fn as_str(self) -> &'static str {
        match self {
            Exposure::NodePort => "nodeport",
            Exposure::HostPort => "hostport",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "nodeport" => Some(Exposure::NodePort),
            "hostport" => Some(Exposure::HostPort),
            _ => None,
        }
    }

    /// Whether a stack of this mode has a Service.
    pub(crate) fn has_service(self) -> bool {
        self == Exposure::NodePort
    }
}

/// `stack-` followed by 16 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct StackId(String);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid stack id")]
pub struct InvalidStackId;

impl StackId {
    const PREFIX: &'static str = "stack-";

    /// A fresh random id.
    pub fn generate() -> Self {
        Self(format!("{}{:016x}", Self::PREFIX, rand::random::<u64>()))
    }

    /// One prefix per leading hex digit of the random part: every id starts with exactly one,
    /// and random ids spread evenly over them, so a reader can split all stacks in 16 ranges.
    pub(crate) fn leading_digit_prefixes() -> impl Iterator<Item = String> {
        (0..16u8).map(|digit| format!("{}{digit:x}", Self::PREFIX))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Name of the stack's pod (the id itself).
    pub fn pod_name(&self) -> String {
        self.0.clone()
    }

    /// Name of the stack's NodePort service.
    pub fn service_name(&self) -> String {
        format!("svc-{}", self.0)
    }
}

impl FromStr for StackId {
    type Err = InvalidStackId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.strip_prefix(Self::PREFIX).is_some_and(is_hex16) {
            Ok(Self(s.to_owned()))
        } else {
            Err(InvalidStackId)
        }
    }
}

impl TryFrom<String> for StackId {
    type Error = InvalidStackId;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<StackId> for String {
    fn from(id: StackId) -> Self {
        id.0
    }
}

impl fmt::Display for StackId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum Protocol {
    Tcp,
    Udp,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
        }
    }

    /// Parses `tcp`/`udp` in any case.
    pub fn parse_any_case(s: &str) -> Option<Self> {
        if s.eq_ignore_ascii_case("tcp") {
            Some(Protocol::Tcp)
        } else if s.eq_ignore_ascii_case("udp") {
            Some(Protocol::Udp)
        } else {
            None
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A container port the participant must reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TargetPort {
    pub container_port: u16,
    pub protocol: Protocol,
}

/// A target port and the node port it is exposed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PortMapping {
    pub container_port: u16,
    pub protocol: Protocol,
    pub node_port: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StackStatus {
    /// Not connectable yet: the pod is not Ready.
    Creating,
    /// Connectable now: the pod is Ready.
    Running,
    /// Pod succeeded.
    Stopped,
    /// It cannot run: its pod failed or could not start (see [`FailureReason`]). Its objects
    /// are deleted at once; the record stays as a tombstone for `STACK_FAILED_RETENTION`.
    Failed,
    /// Its node is gone.
    NodeDeleted,
}

impl StackStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            StackStatus::Creating => "creating",
            StackStatus::Running => "running",
            StackStatus::Stopped => "stopped",
            StackStatus::Failed => "failed",
            StackStatus::NodeDeleted => "node_deleted",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "creating" => StackStatus::Creating,
            "running" => StackStatus::Running,
            "stopped" => StackStatus::Stopped,
            "failed" => StackStatus::Failed,
            "node_deleted" => StackStatus::NodeDeleted,
            _ => return None,
        })
    }

    /// Creating or running: counted as active and holding resources.
    pub(crate) fn is_active(self) -> bool {
        matches!(self, StackStatus::Creating | StackStatus::Running)
    }

    /// Clients treat these as final.
    pub(crate) fn is_terminal(self) -> bool {
        matches!(
            self,
            StackStatus::Stopped | StackStatus::Failed | StackStatus::NodeDeleted
        )
    }

    /// A record of this status is a tombstone: its pod and service were deleted when it
    /// failed, so it holds no port, node or resources, only the reason for clients to read.
    pub(crate) fn is_tombstone(self) -> bool {
        self == StackStatus::Failed
    }
}

/// Why a stack failed: stable names clients may branch on (`stacks/README.md`, "Stack status").
/// Definite causes fail a stack at the first observation; transient ones only once it is
/// older than `STACK_START_TIMEOUT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailureReason {
    /// The registry has no such repository or tag (definite).
    ImageNotFound,
    /// The registry refused the pull: 401/403, denied, no credentials (definite).
    ImagePullDenied,
    /// The pull kept failing for a transient cause (registry unreachable, rate limited,
    /// back-off) until the start timeout.
    ImagePullFailed,
    /// The kubelet cannot parse the image reference (definite).
    InvalidImageName,
    /// The kubelet cannot build the container's configuration, e.g. `runAsNonRoot` on an
    /// image that runs as root, or a missing key (definite).
    ContainerConfigError,
    /// The runtime could not create or start a container (definite; a runtime timeout is
    /// transient).
    ContainerStartError,
    /// A container terminated; with `restartPolicy: Never` it does not come back (definite).
    ContainerExited,
    /// The isolation check found the pod's network open to its node: nothing enforces the
    /// stacks' NetworkPolicy (definite).
    IsolationNotEnforced,
    /// The kubelet evicted the pod (node pressure or the pod's own storage limit; definite).
    Evicted,
    /// A Service of the cluster holds one of a hostport stack's ports as its node port:
    /// kube-proxy forwards that port to the Service, ahead of the stack (definite).
    PortTaken,
    /// The pod failed for a reason none of the above names (definite).
    PodFailed,
    /// Not Ready within `STACK_START_TIMEOUT` of its creation, with no error to name.
    StartTimeout,
}

impl FailureReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::ImageNotFound => "image_not_found",
            FailureReason::ImagePullDenied => "image_pull_denied",
            FailureReason::ImagePullFailed => "image_pull_failed",
            FailureReason::InvalidImageName => "invalid_image_name",
            FailureReason::ContainerConfigError => "container_config_error",
            FailureReason::ContainerStartError => "container_start_error",
            FailureReason::ContainerExited => "container_exited",
            FailureReason::IsolationNotEnforced => "isolation_not_enforced",
            FailureReason::Evicted => "evicted",
            FailureReason::PortTaken => "port_taken",
            FailureReason::PodFailed => "pod_failed",
            FailureReason::StartTimeout => "start_timeout",
        }
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a stack failed, or what holds back one still starting: a reason and a message for
/// humans (mostly the kubelet's own words).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub reason: FailureReason,
    pub message: String,
}

impl Failure {
    /// Longest message kept: kubelet messages (a termination message, a registry's answer)
    /// can run to kilobytes, and the record is read on every status poll.
    pub(crate) const MAX_MESSAGE_CHARS: usize = 1024;

    pub fn new(reason: FailureReason, message: impl Into<String>) -> Self {
        let mut message: String = message.into();
        if let Some((cut, _)) = message.char_indices().nth(Self::MAX_MESSAGE_CHARS) {
            message.truncate(cut);
        }
        Self { reason, message }
    }
}

impl fmt::Display for StackStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the store keeps about one stack; the wire `Stack` object is derived from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackRecord {
    pub stack_id: StackId,
    pub pod_id: String,
    pub namespace: String,
    /// Node name, empty until scheduled.
    pub node_id: String,
    pub node_public_ip: Option<String>,
    /// The hardened YAML actually applied; empty when read without it.
    #[serde(default)]
    pub pod_spec: String,
    /// In request order.
    pub ports: Vec<PortMapping>,
    /// How the ports are exposed; records written before hostport mode existed are nodeport.
    #[serde(default)]
    pub exposure: Exposure,
    /// Empty for a hostport stack (it has no Service).
    pub service_name: String,
    pub status: StackStatus,
    pub ttl_expires_at: Timestamp,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub requested_cpu_milli: i64,
    pub requested_memory_bytes: i64,
    /// The create request's `Idempotency-Key`, removed together with the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Why it failed; set only with status `failed` (records written before reasons existed
    /// have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<FailureReason>,
    /// The failure for humans; set with `reason`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When it was found failed: the tombstone's retention counts from here (from
    /// `updated_at` for records written before this field existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_at: Option<Timestamp>,
    /// The manifest's own labels (ours left out), kept at create so that reads need not parse
    /// the manifest again; records written before this field have none (`None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Whose stack it is; records written before tenants existed belong to `default`.
    #[serde(default)]
    pub tenant: TenantId,
}

impl StackRecord {
    /// The stack's Service, if its mode has one.
    pub fn service(&self) -> Option<&str> {
        (self.exposure.has_service() && !self.service_name.is_empty()).then_some(self.service_name.as_str())
    }

    /// Why it failed, if it did and says why.
    pub fn failure(&self) -> Option<Failure> {
        Some(Failure {
            reason: self.reason?,
            message: self.message.clone().unwrap_or_default(),
        })
    }

    /// Since when a failed stack's tombstone has been kept.
    pub(crate) fn failed_since(&self) -> Timestamp {
        self.failed_at.unwrap_or(self.updated_at)
    }
}

/// What the cluster showed about a stack; written back only when it differs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedState {
    pub status: StackStatus,
    pub node_id: String,
    pub node_public_ip: Option<String>,
    /// Why it failed: set with status `failed` only.
    pub failure: Option<Failure>,
}

impl ObservedState {
    pub fn of(record: &StackRecord) -> Self {
        Self {
            status: record.status,
            node_id: record.node_id.clone(),
            node_public_ip: record.node_public_ip.clone(),
            failure: record.failure(),
        }
    }

    /// `record` as the store's `update_observed` leaves it when writing this at `now`.
    pub(crate) fn apply_to(&self, record: &mut StackRecord, now: Timestamp) {
        record.status = self.status;
        record.node_id.clone_from(&self.node_id);
        record.node_public_ip.clone_from(&self.node_public_ip);
        record.updated_at = now;
        match &self.failure {
            Some(failure) => {
                record.reason = Some(failure.reason);
                record.message = Some(failure.message.clone());
                record.failed_at = Some(now);
            }
            None => (record.reason, record.message, record.failed_at) = (None, None, None),
        }
    }
}

/// What a RuntimeClass adds to each of its pods beside the containers (its `overhead.podFixed`,
/// e.g. gVisor's Sentry and gofer): the scheduler counts it, the kubelet gives it to the pod.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PodOverhead {
    pub(crate) cpu_milli: i64,
    pub(crate) memory_bytes: i64,
}

/// What one stack holds of the cluster: the part of its record that `/stats` counts. The
/// table's `usage` index (template.yaml) projects exactly these attributes, so reading every
/// stack's usage reads small index items, never the records (names must match the record's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackUsage {
    /// Node name, empty until scheduled.
    pub node_id: String,
    pub status: StackStatus,
    pub ports: Vec<PortMapping>,
    pub requested_cpu_milli: i64,
    pub requested_memory_bytes: i64,
    /// Older records carry none: they are NodePort stacks.
    #[serde(default)]
    pub exposure: Exposure,
}

impl From<&StackRecord> for StackUsage {
    fn from(record: &StackRecord) -> Self {
        Self {
            node_id: record.node_id.clone(),
            status: record.status,
            ports: record.ports.clone(),
            requested_cpu_milli: record.requested_cpu_milli,
            requested_memory_bytes: record.requested_memory_bytes,
            exposure: record.exposure,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stack_id_starts_with_exactly_one_leading_digit_prefix() {
        let prefixes: Vec<String> = StackId::leading_digit_prefixes().collect();
        assert_eq!(prefixes.len(), 16);
        for _ in 0..200 {
            let id = StackId::generate();
            let matching = prefixes.iter().filter(|p| id.as_str().starts_with(p.as_str())).count();
            assert_eq!(matching, 1, "{id}");
        }
        assert!(
            prefixes
                .iter()
                .all(|p| p.as_str() < "stack-g" && p.as_str() >= "stack-0")
        );
    }

    #[test]
    fn records_written_before_hostport_mode_read_as_nodeport() {
        let record = StackRecord::test().exposure(Exposure::HostPort);
        assert_eq!(record.service(), None);
        let mut json = serde_json::to_value(&record).unwrap();
        json.as_object_mut().unwrap().remove("exposure");
        json["service_name"] = record.stack_id.service_name().into();
        let old: StackRecord = serde_json::from_value(json).unwrap();
        assert_eq!(old.exposure, Exposure::NodePort);
        assert_eq!(old.service(), Some(record.stack_id.service_name().as_str()));
    }

    #[test]
    fn records_written_before_failure_reasons_still_read() {
        // As the store writes an item: through serde_dynamo.
        let old = StackRecord::test().status(StackStatus::Failed);
        let mut item: std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue> =
            serde_dynamo::to_item(&old).unwrap();
        for field in ["reason", "message", "failed_at"] {
            assert!(!item.contains_key(field), "{field} written without a failure");
        }
        item.remove("idempotency_key");
        let read: StackRecord = serde_dynamo::from_item(item).unwrap();
        assert_eq!(read, old);
        assert_eq!(read.failure(), None);
        assert_eq!(read.failed_since(), read.updated_at);

        let at: Timestamp = "2030-01-01T12:00:00Z".parse().unwrap();
        let tombstone = StackRecord::test().failed(FailureReason::ImagePullDenied, "401 Unauthorized", at);
        let item: std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue> =
            serde_dynamo::to_item(&tombstone).unwrap();
        assert_eq!(
            item.get("reason"),
            Some(&aws_sdk_dynamodb::types::AttributeValue::S("image_pull_denied".into()))
        );
        let read: StackRecord = serde_dynamo::from_item(item).unwrap();
        assert_eq!(read, tombstone);
        assert_eq!(
            read.failure(),
            Some(Failure::new(FailureReason::ImagePullDenied, "401 Unauthorized"))
        );
        assert_eq!(read.failed_since(), at);
    }

    /// The first column of the stacks README's table headed `column`: the names clients may
    /// branch on.
    fn documented(column: &str) -> Vec<&'static str> {
        let header = format!("| `{column}` |");
        include_str!("stacks/README.md")
            .lines()
            .skip_while(|line| !line.starts_with(&header))
            .skip(2)
            .map_while(|row| row.strip_prefix("| `")?.split('`').next())
            .collect()
    }

    /// The names `T`'s schema (hence its serde form) lists, sorted.
    fn wire_names<T: utoipa::PartialSchema>() -> Vec<String> {
        let schema = serde_json::to_value(T::schema()).unwrap();
        let mut names: Vec<String> = serde_json::from_value(schema["enum"].clone()).unwrap();
        names.sort();
        names
    }

    #[test]
    fn statuses_and_failure_reasons_are_the_stable_names_the_readme_documents() {
        let mut reasons = documented("reason");
        reasons.sort_unstable();
        assert_eq!(wire_names::<FailureReason>(), reasons);
        for name in reasons {
            let reason: FailureReason = serde_json::from_value(name.into()).unwrap();
            assert_eq!(reason.as_str(), name);
            assert_eq!(serde_json::to_value(reason).unwrap(), name);
        }
        let mut statuses = documented("status");
        statuses.sort_unstable();
        assert_eq!(wire_names::<StackStatus>(), statuses);
        for name in statuses {
            let status: StackStatus = serde_json::from_value(name.into()).unwrap();
            assert_eq!((status.as_str(), StackStatus::parse(name)), (name, Some(status)));
        }
        assert!(StackStatus::Failed.is_tombstone());
        assert!(!StackStatus::Stopped.is_tombstone() && !StackStatus::NodeDeleted.is_tombstone());
    }

    #[test]
    fn stack_id_roundtrip_and_rejects_bad_ids() {
        let id = StackId::generate();
        assert_eq!(id.as_str().len(), 22);
        assert_eq!(id.as_str().parse::<StackId>(), Ok(id.clone()));
        assert_eq!(id.service_name(), format!("svc-{id}"));
        for bad in [
            "",
            "stack-",
            "stack-0123456789abcdeF",
            "stack-0123456789abcde",
            "pod-0123456789abcdef",
            "stack-0123456789abcdef0",
        ] {
            assert_eq!(bad.parse::<StackId>(), Err(InvalidStackId), "{bad}");
        }
    }

    #[test]
    fn status_and_protocol_wire_names() {
        assert_eq!(
            serde_json::to_string(&StackStatus::NodeDeleted).unwrap(),
            "\"node_deleted\""
        );
        assert_eq!(serde_json::to_string(&Protocol::Udp).unwrap(), "\"UDP\"");
        assert_eq!(Protocol::parse_any_case("tCp"), Some(Protocol::Tcp));
        assert_eq!(Protocol::parse_any_case("sctp"), None);
        assert_eq!(serde_json::to_string(&Exposure::HostPort).unwrap(), "\"hostport\"");
        for e in [Exposure::NodePort, Exposure::HostPort] {
            assert_eq!(Exposure::parse(e.as_str()), Some(e));
        }
        assert!(is_job_id(&new_job_id()));
        for bad in [
            "job-",
            "job-0123456789ABCDEF",
            "job-0123456789abcdef0",
            "stack-0123456789abcdef",
        ] {
            assert!(!is_job_id(bad), "{bad}");
        }
        assert!(!is_job_id(&format!("job-{}", "a".repeat(1030))));
    }
}

/// `job-` followed by 16 lowercase hex digits.
pub fn new_job_id() -> String {
    format!("{JOB_ID_PREFIX}{:016x}", rand::random::<u64>())
}

const JOB_ID_PREFIX: &str = "job-";

/// Whether `s` has the form of [`new_job_id`]: anything else can name no job.
pub(crate) fn is_job_id(s: &str) -> bool {
    s.strip_prefix(JOB_ID_PREFIX).is_some_and(is_hex16)
}

fn is_hex16(s: &str) -> bool {
    s.len() == 16 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    Queued,
    Running,
    Completed,
    Failed,
}

impl JobStatus {
    pub(crate) fn is_finished(self) -> bool {
        matches!(self, JobStatus::Completed | JobStatus::Failed)
    }
}

/// One id a batch delete could not remove.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobError {
    pub stack_id: String,
    pub error: String,
}

/// A durable batch-delete job. `pending` holds the ids not yet processed, so whoever runs
/// next (API invocation or reconciler) can carry the job to completion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchDeleteJob {
    pub job_id: String,
    pub status: JobStatus,
    pub total: u32,
    pub deleted: u32,
    pub not_found: u32,
    pub failed: u32,
    pub errors: Vec<JobError>,
    pub pending: Vec<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// Whose stacks it may delete (jobs stored before tenants existed: all).
    #[serde(default)]
    pub scope: Scope,
}

impl BatchDeleteJob {
    /// At most this many errors are kept, each at most `MAX_ERROR_CHARS` long.
    pub(crate) const MAX_ERRORS: usize = 100;
    pub(crate) const MAX_ERROR_CHARS: usize = 512;
}
