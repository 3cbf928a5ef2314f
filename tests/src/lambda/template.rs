//! What `template.yaml` gives a function: its environment variables (`Globals.Function` merged
//! with the function's own, as SAM merges them), its timeout and its memory size, with every
//! `!Ref` resolved as CloudFormation would for one deployment. Pure: parsing only.
//!
//! The document is read as a generic YAML value, like the table's schema
//! ([`crate::env::template`]): intrinsic-function tags are then plain tagged values.

use std::collections::BTreeMap;
use std::path::Path;

use serde_yaml::Value;

use super::LambdaError;

/// Lambda's own defaults when the template sets none.
const DEFAULT_TIMEOUT_SECONDS: u64 = 3;
const DEFAULT_MEMORY_MB: u64 = 128;

/// What CloudFormation knows only at deploy time: parameter values (the template's default
/// otherwise) and the physical names of resources a `!Ref` names (the table's, locally).
#[derive(Debug, Clone, Default)]
pub struct Deployment {
    pub parameters: BTreeMap<String, String>,
    pub resources: BTreeMap<String, String>,
}

impl Deployment {
    pub fn parameter(mut self, name: &str, value: &str) -> Self {
        self.parameters.insert(name.to_owned(), value.to_owned());
        self
    }

    pub fn resource(mut self, logical_id: &str, physical_name: &str) -> Self {
        self.resources.insert(logical_id.to_owned(), physical_name.to_owned());
        self
    }
}

/// One `AWS::Serverless::Function` as deployed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionDefinition {
    pub logical_id: String,
    /// The cargo binary `sam build` makes the bootstrap of (`Metadata.BuildProperties.Binary`).
    pub binary: Option<String>,
    pub environment: BTreeMap<String, String>,
    pub timeout_seconds: u64,
    pub memory_mb: u64,
}

impl FunctionDefinition {
    /// `logical_id` of the template file at `path`.
    pub fn from_template_file(path: &Path, logical_id: &str, deployment: &Deployment) -> Result<Self, LambdaError> {
        let text = std::fs::read_to_string(path).map_err(|source| LambdaError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_template(&text, logical_id, deployment).map_err(|reason| LambdaError::Template {
            path: path.to_owned(),
            reason,
        })
    }

    pub fn from_template(yaml: &str, logical_id: &str, deployment: &Deployment) -> Result<Self, String> {
        let document: Value = serde_yaml::from_str(yaml).map_err(|e| format!("not YAML: {e}"))?;
        let resolver = Resolver::new(&document, deployment)?;
        let function = document
            .get("Resources")
            .and_then(|resources| resources.get(logical_id))
            .ok_or_else(|| format!("no resource Resources.{logical_id}"))?;
        let kind = function.get("Type").and_then(Value::as_str);
        if kind != Some("AWS::Serverless::Function") {
            return Err(format!(
                "Resources.{logical_id} is {kind:?}, not AWS::Serverless::Function"
            ));
        }
        let globals = document.get("Globals").and_then(|g| g.get("Function"));
        let own = function.get("Properties");
        // The function's own value wins over Globals, property by property.
        let property = |name: &str| {
            own.and_then(|p| p.get(name))
                .or_else(|| globals.and_then(|g| g.get(name)))
        };

        let mut variables: Vec<(&str, &Value)> = Vec::new();
        for scope in [globals, own] {
            let scope_variables = scope
                .and_then(|s| s.get("Environment"))
                .and_then(|e| e.get("Variables"))
                .and_then(Value::as_mapping);
            for (name, value) in scope_variables.into_iter().flatten() {
                variables.push((name.as_str().ok_or("a variable name that is not a string")?, value));
            }
        }
        // Lambda's advanced logging controls reach the function as variables of its own.
        let logging = property("LoggingConfig");
        for (setting, variable) in [
            ("LogFormat", "AWS_LAMBDA_LOG_FORMAT"),
            ("ApplicationLogLevel", "AWS_LAMBDA_LOG_LEVEL"),
        ] {
            if let Some(value) = logging.and_then(|l| l.get(setting)) {
                variables.push((variable, value));
            }
        }
        let mut environment = BTreeMap::new();
        let mut unresolved = Vec::new();
        for (name, value) in variables {
            match resolver.resolve(value) {
                Ok(value) => {
                    environment.insert(name.to_owned(), value);
                }
                Err(why) => unresolved.push(format!("{name}: {why}")),
            }
        }
        let mut number = |name: &str, default: u64| -> u64 {
            let Some(value) = property(name) else { return default };
            match resolver.resolve(value).map(|v| v.parse::<u64>()) {
                Ok(Ok(n)) => n,
                Ok(Err(e)) => {
                    unresolved.push(format!("{name}: {e}"));
                    default
                }
                Err(why) => {
                    unresolved.push(format!("{name}: {why}"));
                    default
                }
            }
        };
        let timeout_seconds = number("Timeout", DEFAULT_TIMEOUT_SECONDS);
        let memory_mb = number("MemorySize", DEFAULT_MEMORY_MB);
        if !unresolved.is_empty() {
            return Err(format!(
                "Resources.{logical_id} cannot be resolved: {}",
                unresolved.join("; ")
            ));
        }
        let binary = function
            .get("Metadata")
            .and_then(|m| m.get("BuildProperties"))
            .and_then(|b| b.get("Binary"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        Ok(Self {
            logical_id: logical_id.to_owned(),
            binary,
            environment,
            timeout_seconds,
            memory_mb,
        })
    }
}

/// The API's binary media types (`Resources.<api>.Properties.BinaryMediaTypes`, SAM's `~1`
/// escape undone): what API Gateway decodes from base64 before answering.
pub fn binary_media_types(yaml: &str, api_logical_id: &str) -> Result<Vec<String>, String> {
    let document: Value = serde_yaml::from_str(yaml).map_err(|e| format!("not YAML: {e}"))?;
    let api = document
        .get("Resources")
        .and_then(|resources| resources.get(api_logical_id))
        .ok_or_else(|| format!("no resource Resources.{api_logical_id}"))?;
    let types = api
        .get("Properties")
        .and_then(|p| p.get("BinaryMediaTypes"))
        .and_then(Value::as_sequence);
    Ok(types
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|t| t.replace("~1", "/"))
        .collect())
}

/// `!Ref` against the template's parameters (a deployment's value, else the default) and
/// the deployment's resource names.
struct Resolver<'a> {
    defaults: BTreeMap<String, Option<String>>,
    deployment: &'a Deployment,
}

impl<'a> Resolver<'a> {
    fn new(document: &Value, deployment: &'a Deployment) -> Result<Self, String> {
        let mut defaults = BTreeMap::new();
        let declared = document.get("Parameters").and_then(Value::as_mapping);
        for (name, parameter) in declared.into_iter().flatten() {
            let name = name.as_str().ok_or("a parameter name that is not a string")?;
            defaults.insert(name.to_owned(), parameter.get("Default").and_then(scalar));
        }
        // A value for a parameter the template does not declare is a typo: say so.
        let unknown: Vec<&String> = deployment
            .parameters
            .keys()
            .filter(|name| !defaults.contains_key(*name))
            .collect();
        if !unknown.is_empty() {
            return Err(format!("no such parameters: {unknown:?}"));
        }
        Ok(Self { defaults, deployment })
    }

    fn resolve(&self, value: &Value) -> Result<String, String> {
        if let Some(text) = scalar(value) {
            return Ok(text);
        }
        let Value::Tagged(tagged) = value else {
            return Err(format!("{value:?} is not a scalar"));
        };
        let (tag, name) = (tagged.tag.to_string(), tagged.value.as_str());
        match (tag.as_str(), name) {
            ("!Ref", Some(name)) => self.reference(name),
            _ => Err(format!("{tag} is not resolved locally")),
        }
    }

    fn reference(&self, name: &str) -> Result<String, String> {
        if let Some(value) = self.deployment.parameters.get(name) {
            return Ok(value.clone());
        }
        match self.defaults.get(name) {
            Some(Some(default)) => Ok(default.clone()),
            Some(None) => Err(format!("parameter {name} has no default: give it a value")),
            None => self
                .deployment
                .resources
                .get(name)
                .cloned()
                .ok_or_else(|| format!("resource {name} has no local name: give it one")),
        }
    }
}

/// A string, number or boolean as CloudFormation passes it to Lambda: a string.
fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEMPLATE: &str = r#"
Parameters:
  Table:
    Type: String
  Ttl:
    Type: String
    Default: 2h
  Timeout:
    Type: Number
    Default: 15
  Key:
    Type: String
    NoEcho: true
Globals:
  Function:
    Timeout: 10
    Environment:
      Variables:
        STACK_TTL: !Ref Ttl
        SHARED: global
        COUNT: 3
Resources:
  Store:
    Type: AWS::DynamoDB::Table
  Api:
    Type: AWS::Serverless::Function
    Properties:
      Timeout: !Ref Timeout
      Environment:
        Variables:
          SHARED: own
          API_KEY: !Ref Key
          DDB_STACK_TABLE: !Ref Store
  Worker:
    Type: AWS::Serverless::Function
    Properties:
      MemorySize: 256
      Environment:
        Variables:
          NAME: !Sub "${AWS::StackName}-worker"
"#;

    fn deployment() -> Deployment {
        Deployment::default()
            .parameter("Key", "k")
            .resource("Store", "local-table")
    }

    #[test]
    fn globals_and_the_functions_own_variables_merge_with_refs_resolved() {
        let api = FunctionDefinition::from_template(TEMPLATE, "Api", &deployment()).expect("resolves");
        let expected: BTreeMap<String, String> = [
            ("STACK_TTL", "2h"),
            ("SHARED", "own"),
            ("COUNT", "3"),
            ("API_KEY", "k"),
            ("DDB_STACK_TABLE", "local-table"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(api.environment, expected);
        assert_eq!(api.timeout_seconds, 15, "the function's Timeout wins over Globals'");
        assert_eq!(api.memory_mb, DEFAULT_MEMORY_MB);
    }

    #[test]
    fn a_deployments_parameter_value_wins_over_the_default() {
        let short = deployment().parameter("Timeout", "5").parameter("Ttl", "30m");
        let api = FunctionDefinition::from_template(TEMPLATE, "Api", &short).expect("resolves");
        assert_eq!(api.timeout_seconds, 5);
        assert_eq!(api.environment["STACK_TTL"], "30m");
    }

    #[test]
    fn what_cannot_be_resolved_is_named() {
        let error = FunctionDefinition::from_template(TEMPLATE, "Api", &Deployment::default()).expect_err("no key");
        assert!(error.contains("API_KEY: parameter Key has no default"), "{error}");
        assert!(
            error.contains("DDB_STACK_TABLE: resource Store has no local name"),
            "{error}"
        );
        let error = FunctionDefinition::from_template(TEMPLATE, "Worker", &deployment()).expect_err("!Sub");
        assert!(error.contains("NAME: !Sub is not resolved locally"), "{error}");
    }

    #[test]
    fn a_misspelt_parameter_is_refused() {
        let typo = deployment().parameter("Timout", "5");
        let error = FunctionDefinition::from_template(TEMPLATE, "Api", &typo).expect_err("typo");
        assert!(error.contains("Timout"), "{error}");
    }

    #[test]
    fn the_checked_in_template_resolves_for_both_functions() {
        let template = std::fs::read_to_string(crate::env::template::template_path()).expect("template.yaml");
        let hash = "ab".repeat(32);
        let local = Deployment::default()
            .parameter("EksClusterName", "local")
            .parameter("ApiKeys", &format!("owner:default:{hash}"))
            .resource("StackTable", "stacks");
        for function in ["ApiFunction", "ReconcilerFunction"] {
            let definition = FunctionDefinition::from_template(&template, function, &local).expect(function);
            assert_eq!(definition.environment["DDB_STACK_TABLE"], "stacks", "{function}");
            assert_eq!(definition.environment["EKS_CLUSTER_NAME"], "local", "{function}");
        }
        let api = FunctionDefinition::from_template(&template, "ApiFunction", &local).expect("api");
        // Keys only as hashes, and only the API's: no key in clear reaches either function.
        assert_eq!(api.environment["API_KEYS"], format!("owner:default:{hash}"));
        let reconciler = FunctionDefinition::from_template(&template, "ReconcilerFunction", &local).expect("rec");
        for (name, environment) in [("api", &api.environment), ("reconciler", &reconciler.environment)] {
            assert!(!environment.contains_key("API_KEY"), "{name} gets a key in clear");
        }
        assert!(
            !reconciler.environment.contains_key("API_KEYS"),
            "only the API gets the keys"
        );
        assert_eq!(api.binary.as_deref(), Some("stack-api"));
        assert_eq!(reconciler.binary.as_deref(), Some("stack-reconciler"));
        // A variable no function reads would leave its setting at the default, silently.
        let settings = stack_core::Config::setting_names();
        let lambdas = [
            "AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH",
            "AWS_LAMBDA_LOG_FORMAT",
            "AWS_LAMBDA_LOG_LEVEL",
        ];
        for (function, environment) in [("api", &api.environment), ("reconciler", &reconciler.environment)] {
            for name in environment.keys() {
                assert!(
                    settings.contains(name) || lambdas.contains(&name.as_str()),
                    "the template gives the {function} {name}, which it does not read"
                );
            }
            assert_eq!(environment["AWS_LAMBDA_LOG_FORMAT"], "JSON", "{function}");
            assert_eq!(environment["AWS_LAMBDA_LOG_LEVEL"], "INFO", "{function}");
        }
    }
}
