//! The API function's answer as API Gateway's REST API reads it (Lambda proxy integration)
//! and passes it on to the client:
//!
//! - the answer must be a JSON object of `statusCode` (an integer), `headers` (strings),
//!   `multiValueHeaders` (lists of strings), `body` (a string) and `isBase64Encoded`, and
//!   nothing else; otherwise API Gateway answers 502 ("Malformed Lambda proxy response");
//! - `headers` and `multiValueHeaders` merge; a name in both keeps the multi-value list only;
//! - a base64 body is decoded only when the request's `Accept` matches one of the API's
//!   binary media types: otherwise the client receives the base64 text itself.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::Value;

use super::LambdaError;
use super::emulator::Invocation;
use super::rest_event::RestRequest;
use super::sandbox::Sandbox;
use super::template::binary_media_types;
use crate::env::template::template_path;

/// The REST API of `template.yaml` in front of the API function.
const API_RESOURCE: &str = "Api";

const FIELDS: [&str; 5] = ["statusCode", "headers", "multiValueHeaders", "body", "isBase64Encoded"];

/// API Gateway in front of a sandbox of the API function: requests become events, answers
/// are read as the deployed API reads them.
#[derive(Debug, Clone)]
pub struct Gateway {
    binary_media_types: Vec<String>,
}

impl Gateway {
    /// The REST API `template.yaml` declares.
    pub fn of_template() -> Result<Self, LambdaError> {
        let path = template_path();
        let text = std::fs::read_to_string(&path).map_err(|source| LambdaError::Read {
            path: path.clone(),
            source,
        })?;
        let binary_media_types =
            binary_media_types(&text, API_RESOURCE).map_err(|reason| LambdaError::Template { path, reason })?;
        Ok(Self { binary_media_types })
    }

    /// One request through the function; an invocation that failed (the emulator's 502) is
    /// an error, as API Gateway answers it with its own 502.
    pub async fn call(&self, sandbox: &Sandbox, request: &RestRequest) -> Result<GatewayResponse, LambdaError> {
        let invocation = sandbox.invoke_json(&request.event()).await?;
        if invocation.status != 200 {
            return Err(LambdaError::Answer(format!(
                "the invocation failed ({}): {}",
                invocation.status,
                invocation.text()
            )));
        }
        self.read(&invocation, request.accept())
    }

    /// The answer of an invocation for a request that sent `accept`.
    pub fn read(&self, invocation: &Invocation, accept: Option<&str>) -> Result<GatewayResponse, LambdaError> {
        GatewayResponse::read(&invocation.body, accept, &self.binary_media_types)
    }
}

/// What the client receives.
#[derive(Debug, Clone)]
pub struct GatewayResponse {
    pub status: u16,
    /// Lower-cased names; every value, in order.
    pub headers: BTreeMap<String, Vec<String>>,
    pub body: Vec<u8>,
    /// What the function said of its body (API Gateway's input, kept for the checks).
    pub is_base64_encoded: bool,
}

impl GatewayResponse {
    /// Reads `answer` for a request that sent `accept`, on an API whose binary media types
    /// are `binary_media_types`.
    pub fn read(answer: &[u8], accept: Option<&str>, binary_media_types: &[String]) -> Result<Self, LambdaError> {
        let malformed = |why: String| LambdaError::Answer(format!("malformed Lambda proxy response: {why}"));
        let value: Value = serde_json::from_slice(answer).map_err(|e| malformed(format!("not JSON: {e}")))?;
        let object = value.as_object().ok_or_else(|| malformed("not an object".into()))?;
        if let Some(unknown) = object.keys().find(|key| !FIELDS.contains(&key.as_str())) {
            return Err(malformed(format!("unknown field {unknown}")));
        }
        let status = object
            .get("statusCode")
            .and_then(Value::as_u64)
            .and_then(|code| u16::try_from(code).ok())
            .ok_or_else(|| malformed("statusCode is not an integer".into()))?;
        let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, value) in object.get("headers").and_then(Value::as_object).into_iter().flatten() {
            let value = value
                .as_str()
                .ok_or_else(|| malformed(format!("header {name} is not a string")))?;
            headers.insert(name.to_ascii_lowercase(), vec![value.to_owned()]);
        }
        let multi = object.get("multiValueHeaders").and_then(Value::as_object);
        for (name, values) in multi.into_iter().flatten() {
            let values = values
                .as_array()
                .ok_or_else(|| malformed(format!("multi-value header {name} is not a list")))?
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| malformed(format!("multi-value header {name} holds a non-string")))?;
            headers.insert(name.to_ascii_lowercase(), values);
        }
        let body = match object.get("body") {
            None | Some(Value::Null) => "",
            Some(Value::String(body)) => body.as_str(),
            Some(_) => return Err(malformed("body is not a string".into())),
        };
        let is_base64_encoded = object.get("isBase64Encoded").and_then(Value::as_bool).unwrap_or(false);
        let decoded = is_base64_encoded && accept.is_some_and(|accept| is_binary(accept, binary_media_types));
        let body = if decoded {
            base64::engine::general_purpose::STANDARD
                .decode(body)
                .map_err(|e| malformed(format!("body is not base64: {e}")))?
        } else {
            body.as_bytes().to_vec()
        };
        Ok(Self {
            status,
            headers,
            body,
            is_base64_encoded,
        })
    }

    /// The header's value (the last, when it has several).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .and_then(|values| values.last())
            .map(String::as_str)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Result<Value, LambdaError> {
        serde_json::from_slice(&self.body)
            .map_err(|e| LambdaError::Answer(format!("body is not JSON ({e}): {}", self.text())))
    }
}

/// API Gateway matches the first media type of `Accept` against the list (`*/*` matches any).
fn is_binary(accept: &str, binary_media_types: &[String]) -> bool {
    let wanted = accept
        .split(',')
        .next()
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim();
    binary_media_types.iter().any(|binary| {
        binary == "*/*" || binary.eq_ignore_ascii_case(wanted) || {
            let (kind, sub) = binary.split_once('/').unwrap_or((binary, ""));
            sub == "*" && wanted.split('/').next().is_some_and(|w| w.eq_ignore_ascii_case(kind))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(answer: &str, accept: Option<&str>, binary: &[&str]) -> Result<GatewayResponse, LambdaError> {
        let binary: Vec<String> = binary.iter().map(|t| (*t).to_owned()).collect();
        GatewayResponse::read(answer.as_bytes(), accept, &binary)
    }

    #[test]
    fn multi_value_headers_win_over_single_ones_of_the_same_name() {
        let answer = r#"{"statusCode":200,"headers":{"X-A":"1","X-B":"2"},"multiValueHeaders":{"x-a":["3","4"]},"body":"ok","isBase64Encoded":false}"#;
        let response = read(answer, None, &[]).expect("well formed");
        assert_eq!(response.headers["x-a"], ["3", "4"]);
        assert_eq!(response.header("X-B"), Some("2"));
        assert_eq!(response.text(), "ok");
    }

    #[test]
    fn a_base64_body_reaches_the_client_as_base64_unless_the_api_declares_it_binary() {
        let answer = r#"{"statusCode":200,"body":"iVBORw==","isBase64Encoded":true}"#;
        let undeclared = read(answer, Some("image/png"), &[]).expect("well formed");
        assert_eq!(undeclared.body, b"iVBORw==");
        let declared = read(answer, Some("image/png"), &["image/*"]).expect("well formed");
        assert_eq!(declared.body, [0x89, b'P', b'N', b'G']);
    }

    #[test]
    fn what_api_gateway_refuses_is_an_error() {
        for answer in [
            r#"{"statusCode":"200","body":""}"#,
            r#"{"statusCode":200,"body":{"a":1}}"#,
            r#"{"statusCode":200,"cookies":[]}"#,
            r#"{"statusCode":200,"headers":{"a":1}}"#,
            r#"[1]"#,
        ] {
            assert!(read(answer, None, &[]).is_err(), "{answer}");
        }
    }
}
