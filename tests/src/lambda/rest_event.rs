//! The event API Gateway's REST API sends the API function for one HTTP request (Lambda proxy
//! integration, payload format 1.0), shaped as the deployed API sends it: `template.yaml`
//! gives `/dashboard`, `/dashboard/{file}` and `/openapi.json` resources of their own and
//! sends everything else through `/` or `/{proxy+}`, under stage `prod` (its default).

use std::collections::BTreeMap;

use serde_json::{Value, json};

const STAGE: &str = "prod";
const API_ID: &str = "abcdef1234";
const DOMAIN: &str = "abcdef1234.execute-api.eu-west-1.amazonaws.com";
const SOURCE_IP: &str = "198.51.100.7";

/// One client request.
#[derive(Debug, Clone)]
pub struct RestRequest {
    method: String,
    path: String,
    query: Vec<(String, String)>,
    headers: Vec<(String, String)>,
    body: Option<String>,
}

impl RestRequest {
    pub fn new(method: &str, path: &str) -> Self {
        Self {
            method: method.to_owned(),
            path: path.to_owned(),
            query: Vec::new(),
            headers: Vec::new(),
            body: None,
        }
    }

    pub fn get(path: &str) -> Self {
        Self::new("GET", path)
    }

    pub fn post(path: &str) -> Self {
        Self::new("POST", path)
    }

    pub fn delete(path: &str) -> Self {
        Self::new("DELETE", path)
    }

    /// One query parameter (API Gateway passes them decoded; a name may repeat).
    pub fn query(mut self, name: &str, value: &str) -> Self {
        self.query.push((name.to_owned(), value.to_owned()));
        self
    }

    /// One header value (a name may repeat).
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn api_key(self, key: &str) -> Self {
        self.header("X-API-KEY", key)
    }

    pub fn json(self, body: &Value) -> Self {
        self.header("Content-Type", "application/json").body(body.to_string())
    }

    /// A text body, as the client sent it (its content type is one of the headers).
    pub fn body(mut self, text: String) -> Self {
        self.body = Some(text);
        self
    }

    /// The value of the request's `Accept` header, which API Gateway matches against the
    /// binary media types when it reads the answer.
    pub fn accept(&self) -> Option<&str> {
        self.headers
            .iter()
            .rev()
            .find(|(name, _)| name.eq_ignore_ascii_case("accept"))
            .map(|(_, value)| value.as_str())
    }

    /// The resource of `template.yaml` that serves the path, and its path parameters.
    fn resource(&self) -> (&'static str, Value) {
        match self.path.as_str() {
            "/" => ("/", Value::Null),
            "/dashboard" => ("/dashboard", Value::Null),
            "/openapi.json" => ("/openapi.json", Value::Null),
            path => match path.strip_prefix("/dashboard/").filter(|file| !file.contains('/')) {
                Some(file) => ("/dashboard/{file}", json!({ "file": file })),
                None => ("/{proxy+}", json!({ "proxy": path.trim_start_matches('/') })),
            },
        }
    }

    /// The event, as API Gateway puts it on the wire to Lambda.
    pub fn event(&self) -> Value {
        let mut headers = vec![
            ("Host".to_owned(), DOMAIN.to_owned()),
            ("X-Forwarded-For".to_owned(), SOURCE_IP.to_owned()),
            ("X-Forwarded-Port".to_owned(), "443".to_owned()),
            ("X-Forwarded-Proto".to_owned(), "https".to_owned()),
            (
                "X-Amzn-Trace-Id".to_owned(),
                "Root=1-65f0c0de-0123456789abcdef01234567".to_owned(),
            ),
        ];
        headers.extend(self.headers.iter().cloned());
        let (single_headers, multi_headers) = single_and_multi(&headers);
        let (single_query, multi_query) = single_and_multi(&self.query);
        let (resource, path_parameters) = self.resource();
        let user_agent = headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("user-agent"))
            .map(|(_, value)| value.clone());
        let api_key = headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("x-api-key"))
            .map(|(_, value)| value.clone());
        json!({
            "resource": resource,
            "path": self.path,
            "httpMethod": self.method,
            "headers": single_headers,
            "multiValueHeaders": multi_headers,
            "queryStringParameters": single_query,
            "multiValueQueryStringParameters": multi_query,
            "pathParameters": path_parameters,
            "stageVariables": null,
            "requestContext": {
                "accountId": "123456789012",
                "apiId": API_ID,
                "domainName": DOMAIN,
                "domainPrefix": API_ID,
                "extendedRequestId": "Ex01dFzbIAMFcXQ=",
                "httpMethod": self.method,
                "identity": {
                    "apiKey": api_key,
                    "sourceIp": SOURCE_IP,
                    "userAgent": user_agent,
                },
                "path": format!("/{STAGE}{}", self.path),
                "protocol": "HTTP/1.1",
                "requestId": format!("{:032x}", rand::random::<u128>()),
                "requestTimeEpoch": jiff::Timestamp::now().as_millisecond(),
                "resourceId": "x1y2z3",
                "resourcePath": resource,
                "stage": STAGE,
            },
            // Every request body of this API is JSON: text, never base64.
            "body": self.body,
            "isBase64Encoded": false,
        })
    }
}

/// API Gateway's two views of repeated names: the last value of each, and all of them;
/// `null` when there are none.
fn single_and_multi(pairs: &[(String, String)]) -> (Value, Value) {
    if pairs.is_empty() {
        return (Value::Null, Value::Null);
    }
    let mut single = BTreeMap::new();
    let mut multi: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (name, value) in pairs {
        single.insert(name.as_str(), value.as_str());
        multi.entry(name).or_default().push(value);
    }
    (json!(single), json!(multi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_query_parameters_keep_every_value_and_the_last_wins_alone() {
        let event = RestRequest::get("/stacks")
            .query("limit", "1")
            .query("limit", "2")
            .event();
        assert_eq!(event["queryStringParameters"], json!({ "limit": "2" }));
        assert_eq!(event["multiValueQueryStringParameters"], json!({ "limit": ["1", "2"] }));
        assert_eq!(event["resource"], "/{proxy+}");
        assert_eq!(event["pathParameters"], json!({ "proxy": "stacks" }));
        assert_eq!(event["requestContext"]["path"], "/prod/stacks");
    }

    #[test]
    fn the_dashboards_resources_are_their_own() {
        let page = RestRequest::get("/dashboard").event();
        assert_eq!(page["resource"], "/dashboard");
        assert_eq!(page["pathParameters"], Value::Null);
        let asset = RestRequest::get("/dashboard/app.js").event();
        assert_eq!(asset["resource"], "/dashboard/{file}");
        assert_eq!(asset["pathParameters"], json!({ "file": "app.js" }));
    }
}
