//! The OpenAPI 3.1 document of every route, generated from the handlers' annotations and the
//! wire types they serialize (`GET /openapi.json`, no key needed).

use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use stack_core::{PortMapping, Protocol};
use std::collections::BTreeMap;

use utoipa::openapi::response::{Response as ResponseDoc, ResponseBuilder};
use utoipa::openapi::schema::{Object, Type};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, SecurityScheme};
use utoipa::openapi::{Content, Header, Ref, RefOr};
use utoipa::{IntoResponses, Modify, OpenApi, ToSchema};

use crate::routes::{batch, dashboard, health, history, identity, preflight, prepull, stacks};

/// Every error: `{"error": "<message>"}`.
#[derive(Serialize, ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody {
    pub error: String,
}

/// An error answer of the documented shape ([`ErrorBody`]).
fn error_answer(description: &str) -> ResponseBuilder {
    ResponseBuilder::new()
        .description(description)
        .content("application/json", Content::new(Some(Ref::from_schema_name("Error"))))
}

/// One documented answer: its status and what it says.
type Answer = (&'static str, ResponseBuilder);

fn answers<const N: usize>(answers: [Answer; N]) -> BTreeMap<String, RefOr<ResponseDoc>> {
    answers
        .into_iter()
        .map(|(status, answer)| (status.to_owned(), RefOr::T(answer.build())))
        .collect()
}

fn key_missing() -> Answer {
    ("401", error_answer("Missing or wrong key"))
}

fn role_refused() -> Answer {
    ("403", error_answer("The key's role may not do this"))
}

fn stack_gone() -> Answer {
    ("404", error_answer("Stack gone"))
}

/// A request body over the router's limit.
fn body_too_large() -> Answer {
    let mib = crate::router::MAX_BODY_BYTES / (1024 * 1024);
    ("413", error_answer(&format!("Body over {mib} MiB")))
}

/// DynamoDB or the apiserver is unavailable; `Retry-After` says when to try again.
fn unavailable() -> Answer {
    let retry_after = Header::new(Object::with_type(Type::String));
    (
        "503",
        error_answer("A dependency is unavailable").header("Retry-After", retry_after),
    )
}

/// Declares named sets of answers that a route's `responses(...)` lists by name, so that the
/// answers many routes share are written once.
macro_rules! response_sets {
    ($($(#[$doc:meta])* $name:ident = [$($answer:expr),+ $(,)?];)+) => {$(
        $(#[$doc])*
        pub struct $name;

        impl IntoResponses for $name {
            fn responses() -> BTreeMap<String, RefOr<ResponseDoc>> {
                answers([$($answer),+])
            }
        }
    )+};
}

response_sets! {
    /// 401 of a route that takes a key whatever its role.
    KeyMissing = [key_missing()];
    /// 401 and 403 of a route whose use depends on the key's role.
    KeyRefused = [key_missing(), role_refused()];
    /// What every route that takes a key may answer besides its own: [`KeyRefused`] and 503.
    KeyedRouteErrors = [key_missing(), role_refused(), unavailable()];
    /// 413 of a route that reads a body.
    BodyTooLarge = [body_too_large()];
    /// What every route that reads a body may answer besides its own: [`KeyedRouteErrors`] and
    /// [`BodyTooLarge`].
    BodyRouteErrors = [body_too_large(), key_missing(), role_refused(), unavailable()];
    /// What every route of one stack may answer besides its own: [`KeyedRouteErrors`] and 404.
    StackRouteErrors = [key_missing(), role_refused(), stack_gone(), unavailable()];
}

/// `DELETE /stacks/{stack_id}`.
#[derive(Serialize, ToSchema)]
pub struct Deleted {
    pub deleted: bool,
    pub stack_id: String,
}

/// `POST /stacks/batch-delete`.
#[derive(Serialize, ToSchema)]
pub struct JobAccepted {
    #[schema(pattern = "^job-[0-9a-f]{16}$")]
    pub job_id: String,
}

#[derive(Serialize, ToSchema)]
pub struct BatchDeleteRequest {
    /// Trimmed; duplicates dropped; a blank one is refused; at most 10,000
    /// (`stacks::MAX_BATCH_IDS`).
    #[schema(min_items = 1, max_items = 10000, value_type = Vec<NonBlank>)]
    pub stack_ids: Vec<String>,
}

/// Anything but blank: a stack id as a client sends it (one that names no stack counts as not
/// found), an image to pre-pull.
#[derive(Serialize, ToSchema)]
#[schema(pattern = "\\S")]
pub struct NonBlank(String);

#[derive(Serialize, ToSchema)]
pub struct Health {
    pub status: String,
}

/// One port to expose (v1 clients).
#[derive(Serialize, ToSchema)]
pub struct TargetPortItem {
    #[schema(minimum = 1, maximum = 65535)]
    pub container_port: u16,
    /// Any case; TCP when absent.
    pub protocol: Option<Protocol>,
}

/// v1 clients send a list, v0 clients one TCP port.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum TargetPorts {
    V1(TargetPortList),
    V0(PortNumber),
}

/// 1 to 24 ports (`validate::MAX_TARGET_PORTS`).
#[derive(Serialize, ToSchema)]
#[schema(min_items = 1, max_items = 24)]
pub struct TargetPortList(Vec<TargetPortItem>);

#[derive(Serialize, ToSchema)]
#[schema(minimum = 1, maximum = 65535)]
pub struct PortNumber(u16);

/// A manifest that passes the validator: the example lets a contract fuzzer create real stacks.
const EXAMPLE_POD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  labels:\n    challenge: web\nspec:\n  containers:\n    - name: web\n      image: nginx:1.27\n      ports:\n        - containerPort: 80\n      resources:\n        limits:\n          cpu: 100m\n          memory: 64Mi\n";

/// `POST /stacks`; unknown fields are ignored.
#[derive(Serialize, ToSchema)]
#[schema(example = json!({"pod_spec": EXAMPLE_POD, "target_port": [{"container_port": 80, "protocol": "TCP"}]}))]
pub struct CreateStackRequest {
    /// One `v1` Pod manifest as YAML.
    pub pod_spec: String,
    pub target_port: TargetPorts,
}

/// `POST /preflight`: the stacks an event expects; unknown fields are ignored.
#[derive(Serialize, ToSchema)]
#[schema(example = json!({"stacks": [{"count": 300, "pod_spec": EXAMPLE_POD, "target_port": [{"container_port": 80}]}], "opening_seconds": 60}))]
pub struct PreflightRequest {
    /// At most 100 kinds of stack (`stacks::MAX_PREFLIGHT_KINDS`), at most 100,000 stacks in all.
    #[schema(min_items = 1, max_items = 100)]
    pub stacks: Vec<ExpectedStacksItem>,
    /// The window the stacks will be created in, for the create-rate check.
    #[schema(minimum = 1, maximum = 86400)]
    pub opening_seconds: Option<u32>,
    /// For a key of every tenant: the tenant whose limit to check.
    pub tenant: Option<String>,
}

/// `PUT /prepull`: the images to keep on every stack node; unknown fields are ignored.
#[derive(Serialize, ToSchema)]
#[schema(example = json!({"images": ["registry.example.com/ctf/web:1", "registry.example.com/ctf/pwn:3"]}))]
pub struct PrepullRequest {
    /// At most 200 (`MAX_PREPULL_IMAGES`), each allowed as a manifest's image would be.
    #[schema(max_items = 200, value_type = Vec<NonBlank>)]
    pub images: Vec<String>,
}

/// Stacks of one manifest, shaped as a create body.
#[derive(Serialize, ToSchema)]
pub struct ExpectedStacksItem {
    #[schema(minimum = 1, maximum = 100000)]
    pub count: u32,
    pub pod_spec: String,
    pub target_port: TargetPorts,
}

struct ApiKeyScheme;

impl Modify for ApiKeyScheme {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("X-API-KEY"))),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "stack-provisioner",
        description = "Isolated per-participant CTF challenge stacks (a Pod, exposed by a NodePort Service \
            or host ports). Every route but /openapi.json and /dashboard needs the key in `X-API-KEY`. \
            A key belongs to one tenant (or, for operator and viewer keys, every tenant) and has a role: \
            `platform` (create, read, renew, delete), `operator` (read, renew, delete, stats, history, batch \
            delete, the images to pre-pull), `viewer` (read, stats, history, the pre-pull's readiness) or `owner` (all; the key of a single-key deployment). \
            A route the role may not use answers 403; a stack or job of another tenant answers 404, \
            exactly as one that does not exist. `GET /identity` tells a key what it is.",
    ),
    paths(
        health::healthz,
        stacks::create,
        stacks::list,
        stacks::get,
        stacks::status,
        stacks::delete,
        stacks::renew,
        stacks::stats,
        batch::start,
        batch::get,
        history::history,
        identity::identity,
        preflight::preflight,
        prepull::readiness,
        prepull::declare,
        dashboard::page,
        openapi_json,
    ),
    components(schemas(PortMapping, Protocol)),
    modifiers(&ApiKeyScheme),
    security(("api_key" = [])),
)]
pub struct ApiDoc;

/// The document, built once.
pub fn document() -> &'static str {
    static DOCUMENT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DOCUMENT.get_or_init(|| ApiDoc::openapi().to_json().unwrap_or_else(|_| "{}".to_owned()))
}

/// This document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    operation_id = "openapi",
    security(()),
    responses((status = 200, description = "OpenAPI 3.1 document", content_type = "application/json", body = Object)),
)]
pub async fn openapi_json() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], document()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn document_is_openapi_3_1_and_names_every_route() {
        let doc: serde_json::Value = serde_json::from_str(document()).unwrap();
        assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
        for path in [
            "/healthz",
            "/stacks",
            "/stacks/{stack_id}",
            "/stacks/{stack_id}/status",
            "/stacks/{stack_id}/renew",
            "/stacks/batch-delete",
            "/stacks/batch-delete/{job_id}",
            "/stats",
            "/history",
            "/identity",
            "/preflight",
            "/prepull",
            "/dashboard",
            "/openapi.json",
        ] {
            assert!(doc["paths"][path].is_object(), "{path} missing");
        }
        assert_eq!(
            doc["paths"]["/openapi.json"]["get"]["security"],
            serde_json::json!([{}])
        );
    }

    /// What the handlers refuse is declared, so that clients and contract fuzzers stay
    /// within what the API accepts.
    #[test]
    fn document_declares_the_limits_the_handlers_enforce() {
        let doc: serde_json::Value = serde_json::from_str(document()).unwrap();
        let limit = &doc["paths"]["/stacks"]["get"]["parameters"][0];
        assert_eq!(limit["name"], "limit");
        assert_eq!(
            (&limit["schema"]["minimum"], &limit["schema"]["maximum"]),
            (&1.into(), &1000.into())
        );
        let ids = &doc["components"]["schemas"]["BatchDeleteRequest"]["properties"]["stack_ids"];
        let item = resolved(&doc["components"]["schemas"], &ids["items"]);
        assert_eq!(item["pattern"], "\\S", "{ids}");
        assert_eq!(ids["maxItems"], stack_core::MAX_BATCH_IDS, "{ids}");
        let images = &doc["components"]["schemas"]["PrepullRequest"]["properties"]["images"];
        assert_eq!(
            images["items"], ids["items"],
            "a blank image is refused as a blank id is"
        );
        let mut with_body = 0;
        for (path, operations) in doc["paths"].as_object().unwrap() {
            for (method, operation) in operations.as_object().unwrap() {
                if operation.get("requestBody").is_some() {
                    with_body += 1;
                    let too_large = &operation["responses"]["413"]["description"];
                    assert_eq!(too_large, "Body over 1 MiB", "{method} {path}");
                }
            }
        }
        assert_eq!(
            with_body, 4,
            "create, batch delete, preflight and the pre-pull list read a body"
        );
    }

    /// A client generating requests from the document is not refused for its ports: the
    /// bounds it declares are where the body parser and the validator draw the line.
    #[test]
    fn target_port_bounds_are_those_a_create_enforces() {
        let doc: serde_json::Value = serde_json::from_str(document()).unwrap();
        let schemas = &doc["components"]["schemas"];
        let (lowest, highest) = (&schemas["PortNumber"]["minimum"], &schemas["PortNumber"]["maximum"]);
        let parses = |port: i64| {
            crate::wire::parse_create_body(format!(r#"{{"pod_spec":"x","target_port":{port}}}"#).as_bytes()).is_ok()
        };
        let (lowest, highest) = (lowest.as_i64().unwrap(), highest.as_i64().unwrap());
        assert!(parses(lowest) && parses(highest), "{lowest}..={highest}");
        assert!(!parses(lowest - 1) && !parses(highest + 1), "{lowest}..={highest}");

        let list = &schemas["TargetPortList"];
        let policy = stack_core::Config::from_lookup(|_| None).unwrap().validation;
        let id: stack_core::StackId = "stack-0123456789abcdef".parse().unwrap();
        let creates = |count: u64| {
            let ports: Vec<_> = (1..=count as u16)
                .map(|port| stack_core::TargetPort {
                    container_port: port,
                    protocol: Protocol::Tcp,
                })
                .collect();
            let declared: String = ports
                .iter()
                .map(|p| format!("\n        - containerPort: {}", p.container_port))
                .collect();
            let manifest = format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n    - name: web\n      image: nginx:1.27\n      resources: {{limits: {{cpu: 100m, memory: 64Mi}}}}\n      ports:{declared}\n"
            );
            stack_core::validate(&manifest, &ports, &id, &policy).map_err(|r| r.to_string())
        };
        let (fewest, most) = (list["minItems"].as_u64().unwrap(), list["maxItems"].as_u64().unwrap());
        creates(fewest).unwrap();
        creates(most).unwrap();
        assert!(creates(fewest - 1).unwrap_err().starts_with("target_port"));
        assert!(creates(most + 1).unwrap_err().starts_with("target_port"));
    }

    /// Failed stacks say why in two optional fields; the fields clients already read stay
    /// as they were (required, same types).
    #[test]
    fn stack_and_status_summary_carry_an_optional_reason_and_message() {
        let doc: serde_json::Value = serde_json::from_str(document()).unwrap();
        let schemas = &doc["components"]["schemas"];
        let reasons = schemas["FailureReason"]["enum"].as_array().expect("FailureReason enum");
        for name in [
            "image_not_found",
            "image_pull_denied",
            "image_pull_failed",
            "invalid_image_name",
            "container_config_error",
            "container_start_error",
            "container_exited",
            "isolation_not_enforced",
            "evicted",
            "port_taken",
            "pod_failed",
            "start_timeout",
        ] {
            assert!(reasons.contains(&name.into()), "{name} missing from {reasons:?}");
        }
        for (schema, existing) in [
            ("Stack", &["stack_id", "status", "ports", "ttl_expires_at"][..]),
            ("StatusSummary", &["stack_id", "status", "ttl", "ports"][..]),
        ] {
            let (properties, required) = merged_object(schemas, &schemas[schema]);
            for field in existing {
                assert!(required.contains(field), "{schema}.{field} no longer required");
            }
            for field in ["reason", "message"] {
                assert!(properties[field].is_object(), "{schema}.{field} missing");
                assert!(!required.contains(&field), "{schema}.{field} required");
            }
            assert_eq!(
                properties["reason"]["$ref"], "#/components/schemas/FailureReason",
                "{schema}: {}",
                properties["reason"]
            );
            assert_eq!(properties["message"]["type"], "string", "{schema}");
        }
    }

    /// `schema`, or the component of `schemas` it refers to.
    fn resolved<'a>(schemas: &'a serde_json::Value, schema: &'a serde_json::Value) -> &'a serde_json::Value {
        match schema["$ref"].as_str() {
            Some(reference) => &schemas[reference.trim_start_matches("#/components/schemas/")],
            None => schema,
        }
    }

    /// The properties and required names of an object schema, its `allOf` parts (inline or
    /// referenced) merged as a validator reads them.
    fn merged_object<'a>(
        schemas: &'a serde_json::Value,
        object: &'a serde_json::Value,
    ) -> (serde_json::Map<String, serde_json::Value>, Vec<&'a str>) {
        let object = resolved(schemas, object);
        let mut properties = object["properties"].as_object().cloned().unwrap_or_default();
        let mut required: Vec<&str> = object["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str())
            .collect();
        for part in object["allOf"].as_array().into_iter().flatten() {
            let (more, also) = merged_object(schemas, part);
            properties.extend(more);
            required.extend(also);
        }
        (properties, required)
    }
}
