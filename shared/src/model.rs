//! Domain types shared by the API, the store and the reconciler.

use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// Label every object we create carries; the reconciler only ever deletes objects with it.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "stack-provisioner";
/// Label naming the stack an object belongs to; the Service selects its pod by it.
pub const STACK_ID_LABEL: &str = "stack-provisioner/stack-id";
/// Prefix of our own label/annotation keys; input manifests may not use it.
pub const OWN_LABEL_PREFIX: &str = "stack-provisioner/";
/// Annotation of a hostport stack's pod listing its host ports (`31001,31002`), so that port
/// use can be read from a metadata-only pod list.
pub const HOST_PORTS_ANNOTATION: &str = "stack-provisioner/host-ports";

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
    pub fn has_service(self) -> bool {
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
    pub fn leading_digit_prefixes() -> impl Iterator<Item = String> {
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
    /// Pod not yet running.
    Creating,
    Running,
    /// Pod succeeded.
    Stopped,
    /// Pod failed.
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
    pub fn is_active(self) -> bool {
        matches!(self, StackStatus::Creating | StackStatus::Running)
    }

    /// Clients treat these as final.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            StackStatus::Stopped | StackStatus::Failed | StackStatus::NodeDeleted
        )
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
}

impl StackRecord {
    /// The stack's Service, if its mode has one.
    pub fn service(&self) -> Option<&str> {
        (self.exposure.has_service() && !self.service_name.is_empty()).then_some(self.service_name.as_str())
    }
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
        for s in [
            StackStatus::Creating,
            StackStatus::Running,
            StackStatus::Stopped,
            StackStatus::Failed,
            StackStatus::NodeDeleted,
        ] {
            assert_eq!(StackStatus::parse(s.as_str()), Some(s));
        }
    }
}

/// `job-` followed by 16 lowercase hex digits.
pub fn new_job_id() -> String {
    format!("{JOB_ID_PREFIX}{:016x}", rand::random::<u64>())
}

const JOB_ID_PREFIX: &str = "job-";

/// Whether `s` has the form of [`new_job_id`]: anything else can name no job.
pub fn is_job_id(s: &str) -> bool {
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
    pub fn is_finished(self) -> bool {
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
}

impl BatchDeleteJob {
    /// At most this many errors are kept, each at most `MAX_ERROR_CHARS` long.
    pub const MAX_ERRORS: usize = 100;
    pub const MAX_ERROR_CHARS: usize = 512;
}
