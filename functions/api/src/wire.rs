//! JSON shapes of the contract: the Stack and StatusSummary objects, the create request in
//! both client generations (v1: `target_port` array; v0: one integer, TCP) and the list page.

use std::collections::BTreeMap;
use std::io;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use stack_core::{
    EventPlan, ExpectedStacks, FailureReason, ListCursor, MANAGED_BY_LABEL, OWN_LABEL_PREFIX, PortMapping, Protocol,
    StackRecord, StackStatus, TargetPort, TenantId,
};

use crate::error::ApiError;

/// `GET /stacks` page size when `limit` is not given.
pub const DEFAULT_PAGE_LIMIT: usize = 100;
/// Largest `limit` accepted.
pub const MAX_PAGE_LIMIT: usize = 1000;
/// What one page's stacks may take in the function's response (see [`payload_bytes`]):
/// far below Lambda's 6 MB response limit, whatever the manifests are.
pub const MAX_PAGE_PAYLOAD_BYTES: usize = 4 * 1024 * 1024;

/// The contract's Stack object.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = Stack)]
pub struct StackView<'a> {
    #[schema(pattern = "^stack-[0-9a-f]{16}$")]
    pub stack_id: &'a str,
    pub pod_id: &'a str,
    pub namespace: &'a str,
    pub node_id: &'a str,
    pub node_public_ip: Option<&'a str>,
    pub pod_spec: &'a str,
    pub ports: &'a [PortMapping],
    pub service_name: &'a str,
    pub status: StackStatus,
    #[serde(flatten)]
    pub failure: FailureView<'a>,
    pub ttl_expires_at: Timestamp,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub requested_cpu_milli: i64,
    pub requested_memory_bytes: i64,
    /// v0 readers: the first port.
    pub target_port: Option<u16>,
    pub node_port: Option<u16>,
    /// The manifest's own labels (ours left out), e.g. the challenge label the dashboard
    /// groups by; omitted when there are none or the manifest was not read.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

impl<'a> From<&'a StackRecord> for StackView<'a> {
    fn from(r: &'a StackRecord) -> Self {
        Self {
            stack_id: r.stack_id.as_str(),
            pod_id: &r.pod_id,
            namespace: &r.namespace,
            node_id: &r.node_id,
            node_public_ip: r.node_public_ip.as_deref(),
            pod_spec: &r.pod_spec,
            ports: &r.ports,
            service_name: &r.service_name,
            status: r.status,
            failure: FailureView::of(r),
            ttl_expires_at: r.ttl_expires_at,
            created_at: r.created_at,
            updated_at: r.updated_at,
            requested_cpu_milli: r.requested_cpu_milli,
            requested_memory_bytes: r.requested_memory_bytes,
            target_port: r.ports.first().map(|p| p.container_port),
            node_port: r.ports.first().map(|p| p.node_port),
            labels: r.labels.clone().unwrap_or_else(|| manifest_labels(&r.pod_spec)),
        }
    }
}

/// `metadata.labels` of a stored (hardened) manifest, without ours. Only that part is
/// deserialized; a manifest that cannot be read has none.
pub fn manifest_labels(pod_spec: &str) -> BTreeMap<String, String> {
    #[derive(Deserialize)]
    struct Pod {
        #[serde(default)]
        metadata: Meta,
    }
    #[derive(Deserialize, Default)]
    struct Meta {
        #[serde(default)]
        labels: BTreeMap<String, String>,
    }
    if pod_spec.is_empty() {
        return BTreeMap::new();
    }
    let mut labels = serde_yaml::from_str::<Pod>(pod_spec)
        .map(|p| p.metadata.labels)
        .unwrap_or_default();
    labels.retain(|k, _| k != MANAGED_BY_LABEL && !k.starts_with(OWN_LABEL_PREFIX));
    labels
}

/// Why a stack failed, in the Stack and StatusSummary objects: nothing unless it failed.
#[derive(Debug, Default, Serialize, utoipa::ToSchema)]
#[schema(as = StackFailure)]
pub struct FailureView<'a> {
    /// Why the stack failed; present only when `status` is `failed` (and said why).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub reason: Option<FailureReason>,
    /// The failure for humans (mostly the kubelet's words); present with `reason`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub message: Option<&'a str>,
}

impl<'a> FailureView<'a> {
    fn of(r: &'a StackRecord) -> Self {
        if r.status != StackStatus::Failed || r.reason.is_none() {
            return Self::default();
        }
        Self {
            reason: r.reason,
            message: r.message.as_deref(),
        }
    }
}

/// The contract's StatusSummary object.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = StatusSummary)]
pub struct StatusView<'a> {
    pub stack_id: &'a str,
    pub status: StackStatus,
    #[serde(flatten)]
    pub failure: FailureView<'a>,
    pub ttl: Timestamp,
    pub ports: &'a [PortMapping],
    pub node_public_ip: Option<&'a str>,
    pub target_port: Option<u16>,
    pub node_port: Option<u16>,
}

impl<'a> From<&'a StackRecord> for StatusView<'a> {
    fn from(r: &'a StackRecord) -> Self {
        Self {
            stack_id: r.stack_id.as_str(),
            status: r.status,
            failure: FailureView::of(r),
            ttl: r.ttl_expires_at,
            ports: &r.ports,
            node_public_ip: r.node_public_ip.as_deref(),
            target_port: r.ports.first().map(|p| p.container_port),
            node_port: r.ports.first().map(|p| p.node_port),
        }
    }
}

/// One page of `GET /stacks`: oldest first; `next_cursor` only when more stacks follow.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct StackPage<'a> {
    pub stacks: Vec<StackView<'a>>,
    /// Opaque; pass it as `cursor` for the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// The query of `GET /stacks`.
#[derive(Debug, PartialEq, Eq)]
pub struct ListQuery {
    pub limit: usize,
    /// Where the page starts; the first page without it.
    pub cursor: Option<ListCursor>,
}

/// Parses `limit` (1..=1000, default 100) and `cursor` (from a previous page); other
/// parameters (`api_key`) are not ours to judge.
pub fn parse_list_query(query: Option<&str>) -> Result<ListQuery, ApiError> {
    let mut limit = None;
    let mut cursor = None;
    for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match name.as_ref() {
            "limit" if limit.is_some() => return Err(ApiError::bad_request("invalid limit: given twice")),
            "limit" => limit = Some(page_limit(&value)?),
            "cursor" if cursor.is_some() => return Err(ApiError::bad_request("invalid cursor: given twice")),
            "cursor" => {
                cursor = Some(ListCursor::decode(&value).map_err(|_| ApiError::bad_request("invalid cursor"))?);
            }
            _ => {}
        }
    }
    Ok(ListQuery {
        limit: limit.unwrap_or(DEFAULT_PAGE_LIMIT),
        cursor,
    })
}

fn page_limit(value: &str) -> Result<usize, ApiError> {
    let invalid = || ApiError::bad_request(format!("invalid limit: must be an integer from 1 to {MAX_PAGE_LIMIT}"));
    if value.is_empty() || value.len() > 4 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    value
        .parse()
        .ok()
        .filter(|n| (1..=MAX_PAGE_LIMIT).contains(n))
        .ok_or_else(invalid)
}

/// Bytes `value` takes in the function's response: its JSON, plus one per `"` and `\`, which
/// are escaped once more where the body is embedded as a string in the Lambda response.
pub fn payload_bytes(value: &impl Serialize) -> usize {
    let mut counter = PayloadCounter { bytes: 0 };
    // Counting never fails, and our views always serialize.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.bytes
}

struct PayloadCounter {
    bytes: usize,
}

impl io::Write for PayloadCounter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let escaped = buf.iter().filter(|&&b| b == b'"' || b == b'\\').count();
        self.bytes = self.bytes.saturating_add(buf.len() + escaped);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A parsed create body.
#[derive(Debug, PartialEq, Eq)]
pub struct CreateBody {
    pub pod_spec: String,
    pub target_ports: Vec<TargetPort>,
}

/// Parses `{"pod_spec": "<yaml>", "target_port": [...] | <int>}`; unknown fields are ignored.
pub fn parse_create_body(body: &[u8]) -> Result<CreateBody, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|_| ApiError::invalid_json())?;
    create_body(&value)
}

fn create_body(value: &Value) -> Result<CreateBody, ApiError> {
    let object = value.as_object().ok_or_else(ApiError::invalid_json)?;
    let pod_spec = match object.get("pod_spec") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        Some(Value::String(_)) | None | Some(Value::Null) => {
            return Err(ApiError::bad_request("invalid pod spec: pod_spec is required"));
        }
        Some(_) => return Err(ApiError::invalid_json()),
    };
    let target_ports = match object.get("target_port") {
        None | Some(Value::Null) => return Err(ApiError::bad_request("target_port is required")),
        Some(Value::Number(n)) => vec![TargetPort {
            container_port: port_number(n.as_i64(), "target_port")?,
            protocol: Protocol::Tcp,
        }],
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| target_port(i, item))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(ApiError::invalid_json()),
    };
    Ok(CreateBody { pod_spec, target_ports })
}

/// Parses `PUT /prepull`'s `{"images": ["<reference>", ...]}`.
pub fn parse_prepull_body(body: &[u8]) -> Result<Vec<String>, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|_| ApiError::invalid_json())?;
    let images = value
        .get("images")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::bad_request("images is required (a list of image references)"))?;
    images
        .iter()
        .enumerate()
        .map(|(index, image)| {
            image
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| ApiError::bad_request(format!("images[{index}] must be a string")))
        })
        .collect()
}

/// Parses `POST /preflight`'s `{"stacks": [{"count": N, "pod_spec": ..., "target_port": ...}],
/// "opening_seconds": S, "tenant": "ctf"}` (each item shaped as a create body).
pub fn parse_preflight_body(body: &[u8]) -> Result<EventPlan, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|_| ApiError::invalid_json())?;
    let object = value.as_object().ok_or_else(ApiError::invalid_json)?;
    let items = object
        .get("stacks")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::bad_request("stacks is required"))?;
    let stacks = items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let count = item
                .get("count")
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| ApiError::bad_request(format!("stacks[{index}].count is required")))?;
            let CreateBody { pod_spec, target_ports } = create_body(item)?;
            Ok(ExpectedStacks {
                count,
                manifest: pod_spec,
                target_ports,
            })
        })
        .collect::<Result<_, ApiError>>()?;
    let opening_seconds = match object.get("opening_seconds") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => Some(
            n.as_u64()
                .filter(|s| (1..=86_400).contains(s))
                .map(|s| s as f64)
                .ok_or_else(|| ApiError::bad_request("opening_seconds must be a whole number, 1 to 86400"))?,
        ),
        Some(_) => return Err(ApiError::invalid_json()),
    };
    let tenant = match object.get("tenant") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => Some(TenantId::parse(name).map_err(ApiError::bad_request)?),
        Some(_) => return Err(ApiError::invalid_json()),
    };
    Ok(EventPlan {
        stacks,
        opening_seconds,
        tenant,
    })
}

fn target_port(index: usize, item: &Value) -> Result<TargetPort, ApiError> {
    let object = item.as_object().ok_or_else(ApiError::invalid_json)?;
    let container_port = match object.get("container_port") {
        Some(Value::Number(n)) => port_number(n.as_i64(), &format!("target_port[{index}].container_port"))?,
        None | Some(Value::Null) => {
            return Err(ApiError::bad_request(format!(
                "target_port[{index}].container_port is required"
            )));
        }
        Some(_) => return Err(ApiError::invalid_json()),
    };
    let protocol = match object.get("protocol") {
        None | Some(Value::Null) => Protocol::Tcp,
        Some(Value::String(s)) => Protocol::parse_any_case(s)
            .ok_or_else(|| ApiError::bad_request(format!("target_port[{index}].protocol must be TCP or UDP")))?,
        Some(_) => return Err(ApiError::invalid_json()),
    };
    Ok(TargetPort {
        container_port,
        protocol,
    })
}

fn port_number(n: Option<i64>, field: &str) -> Result<u16, ApiError> {
    n.and_then(|n| u16::try_from(n).ok())
        .filter(|&p| p >= 1)
        .ok_or_else(|| ApiError::bad_request(format!("{field} must be in 1..65535")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<CreateBody, String> {
        parse_create_body(body.as_bytes()).map_err(|e| format!("{} {}", e.status.as_u16(), e.message))
    }

    #[test]
    fn manifest_labels_keep_the_platforms_and_drop_ours() {
        let yaml = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: stack-0\n  labels:\n    challenge: web-1\n    app.kubernetes.io/managed-by: stack-provisioner\n    stack-provisioner/stack-id: stack-0\nspec:\n  containers: []\n";
        assert_eq!(
            manifest_labels(yaml),
            BTreeMap::from([("challenge".to_owned(), "web-1".to_owned())])
        );
        assert!(manifest_labels("").is_empty());
        assert!(manifest_labels(": not yaml [").is_empty());
    }

    fn record(status: StackStatus) -> StackRecord {
        let at: Timestamp = "2030-01-01T12:00:00Z".parse().unwrap();
        StackRecord::test()
            .id("stack-00000000000000aa".parse().unwrap())
            .node("n1")
            .public_ip("203.0.113.1")
            .tcp_ports(31001, 1)
            .status(status)
            .created_at(at)
            .ttl_expires_at(at)
            .requests(100, 1 << 20)
    }

    #[test]
    fn the_labels_kept_at_create_are_shown_without_reading_the_manifest() {
        let manifest = "apiVersion: v1\nkind: Pod\nmetadata:\n  labels:\n    challenge: from-the-manifest\n";
        let mut kept = record(StackStatus::Running);
        kept.pod_spec = manifest.to_owned();
        kept.labels = Some(BTreeMap::from([("challenge".to_owned(), "kept".to_owned())]));
        assert_eq!(StackView::from(&kept).labels["challenge"], "kept");
        // A record written before labels were kept: read from its manifest.
        kept.labels = None;
        assert_eq!(StackView::from(&kept).labels["challenge"], "from-the-manifest");
    }

    #[test]
    fn a_failed_stack_says_why_and_others_carry_no_reason_at_all() {
        let mut failed = record(StackStatus::Failed);
        failed.reason = Some(FailureReason::ImageNotFound);
        failed.message = Some("container web: ErrImagePull: 10.80.0.1:5000/nope:1: not found".into());
        failed.failed_at = Some(failed.updated_at);
        for json in [
            serde_json::to_value(StackView::from(&failed)).unwrap(),
            serde_json::to_value(StatusView::from(&failed)).unwrap(),
        ] {
            assert_eq!(json["status"], "failed");
            assert_eq!(json["reason"], "image_not_found");
            assert_eq!(
                json["message"],
                "container web: ErrImagePull: 10.80.0.1:5000/nope:1: not found"
            );
        }
        // Every other status (and a failed record from before reasons existed) has neither
        // field, so existing clients see exactly what they saw before.
        let old_failed = record(StackStatus::Failed);
        for record in [record(StackStatus::Running), record(StackStatus::Creating), old_failed] {
            for json in [
                serde_json::to_value(StackView::from(&record)).unwrap(),
                serde_json::to_value(StatusView::from(&record)).unwrap(),
            ] {
                let object = json.as_object().unwrap();
                assert!(
                    !object.contains_key("reason") && !object.contains_key("message"),
                    "{json}"
                );
            }
        }
        // A reason left on a record of another status is not shown.
        let mut stray = failed.clone();
        stray.status = StackStatus::Running;
        let json = serde_json::to_value(StatusView::from(&stray)).unwrap();
        assert!(json.get("reason").is_none(), "{json}");
    }

    #[test]
    fn both_client_generations_parse() {
        let v1 = parse(r#"{"pod_spec":"x","target_port":[{"container_port":80,"protocol":"udp"},{"container_port":22}],"extra":1}"#).unwrap();
        assert_eq!(
            v1.target_ports,
            vec![
                TargetPort {
                    container_port: 80,
                    protocol: Protocol::Udp
                },
                TargetPort {
                    container_port: 22,
                    protocol: Protocol::Tcp
                }
            ]
        );
        let v0 = parse(r#"{"pod_spec":"x","target_port":8080}"#).unwrap();
        assert_eq!(
            v0.target_ports,
            vec![TargetPort {
                container_port: 8080,
                protocol: Protocol::Tcp
            }]
        );
    }

    #[test]
    fn list_query_takes_a_limit_and_a_cursor() {
        let all = parse_list_query(None).unwrap();
        assert_eq!((all.limit, all.cursor), (DEFAULT_PAGE_LIMIT, None));
        assert_eq!(parse_list_query(Some("api_key=k&limit=1")).unwrap().limit, 1);
        assert_eq!(parse_list_query(Some("limit=1000")).unwrap().limit, 1000);
        for bad in [
            "limit=0",
            "limit=1001",
            "limit=-1",
            "limit=+5",
            "limit=5.0",
            "limit=ten",
            "limit=",
            "limit=99999999999999999999",
            "limit=5&limit=6",
        ] {
            let err = parse_list_query(Some(bad)).unwrap_err();
            assert_eq!(err.status.as_u16(), 400, "{bad}");
            assert!(err.message.starts_with("invalid limit"), "{bad}: {}", err.message);
        }
        for bad in ["cursor=", "cursor=abc", "cursor=%00%01"] {
            let err = parse_list_query(Some(bad)).unwrap_err();
            assert_eq!(
                (err.status.as_u16(), err.message.as_str()),
                (400, "invalid cursor"),
                "{bad}"
            );
        }
    }

    #[test]
    fn payload_counts_the_second_escaping_of_the_body() {
        assert_eq!(payload_bytes(&"ab"), 4 + 2);
        assert_eq!(
            payload_bytes(&"a\nb\"q\""),
            serde_json::to_string(&"a\nb\"q\"").unwrap().len() + 7
        );
    }

    #[test]
    fn bad_bodies_name_the_problem() {
        assert_eq!(parse("not json").unwrap_err(), "400 invalid json body");
        assert_eq!(parse("[]").unwrap_err(), "400 invalid json body");
        assert_eq!(
            parse(r#"{"pod_spec":5,"target_port":80}"#).unwrap_err(),
            "400 invalid json body"
        );
        assert_eq!(
            parse(r#"{"pod_spec":"x","target_port":"80"}"#).unwrap_err(),
            "400 invalid json body"
        );
        assert_eq!(
            parse(r#"{"pod_spec":"x","target_port":[{"container_port":"80"}]}"#).unwrap_err(),
            "400 invalid json body"
        );
        assert_eq!(
            parse(r#"{"target_port":80}"#).unwrap_err(),
            "400 invalid pod spec: pod_spec is required"
        );
        assert_eq!(parse(r#"{"pod_spec":"x"}"#).unwrap_err(), "400 target_port is required");
        assert_eq!(
            parse(r#"{"pod_spec":"x","target_port":70000}"#).unwrap_err(),
            "400 target_port must be in 1..65535"
        );
        assert_eq!(
            parse(r#"{"pod_spec":"x","target_port":0}"#).unwrap_err(),
            "400 target_port must be in 1..65535"
        );
        assert_eq!(
            parse(r#"{"pod_spec":"x","target_port":[{"container_port":80,"protocol":"sctp"}]}"#).unwrap_err(),
            "400 target_port[0].protocol must be TCP or UDP"
        );
    }
}
