//! A function of `template.yaml` started under the emulator over the local environment: the
//! variables the template gives it for a deployment, the ones Lambda itself sets, and the
//! local cloud's endpoints in place of AWS's.

use std::collections::BTreeMap;
use std::time::Duration;

use super::LambdaError;
use super::artifacts::{self, Bootstraps};
use super::emulator::{Emulator, Invocation};
use super::template::{Deployment, FunctionDefinition};
use crate::env::template::template_path;
use crate::env::{EnvSettings, SIMULATED_ROLE};
use stack_core::KeyHash;

/// The key a local deployment is given: the one the sample events carry.
pub const LOCAL_API_KEY: &str = crate::api::API_KEY;

/// The two functions of the template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LambdaFunction {
    Api,
    Reconciler,
}

impl LambdaFunction {
    pub fn logical_id(self) -> &'static str {
        match self {
            LambdaFunction::Api => "ApiFunction",
            LambdaFunction::Reconciler => "ReconcilerFunction",
        }
    }

    /// `api` or `reconciler`, as `tests/env/invoke` names them.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "api" => Some(LambdaFunction::Api),
            "reconciler" => Some(LambdaFunction::Reconciler),
            _ => None,
        }
    }
}

/// How to start one function: a deployment of the template, then changes to the variables
/// it gives (to break the configuration on purpose).
#[derive(Debug, Clone)]
pub struct LocalFunction {
    function: LambdaFunction,
    deployment: Deployment,
    settings: EnvSettings,
    set: BTreeMap<String, String>,
    removed: Vec<String>,
    bootstraps: Bootstraps,
}

impl LocalFunction {
    /// `function` deployed over the local environment of `settings`: no EKS cluster (the
    /// kubeconfig instead), the environment's table, key [`LOCAL_API_KEY`]; every other
    /// parameter has the template's default until [`parameter`](Self::parameter) says otherwise.
    pub fn new(function: LambdaFunction, settings: &EnvSettings) -> Self {
        let deployment = Deployment::default()
            .parameter("EksClusterName", "")
            .parameter(
                "ApiKeys",
                &format!("owner:default:{}", KeyHash::of(LOCAL_API_KEY).to_hex()),
            )
            .resource("StackTable", &settings.table);
        Self {
            function,
            deployment,
            settings: settings.clone(),
            set: BTreeMap::new(),
            removed: Vec::new(),
            bootstraps: Bootstraps::sam_build(),
        }
    }

    /// Over `table` and `namespace`, stacks on the simulated nodes (kwok runs no container, so
    /// any image will do) and no kube-proxy to wait for. What the tests and benchmarks of the local cluster use.
    pub fn on_simulated_nodes(self, table: &str, namespace: &str) -> Self {
        self.table(table)
            .parameter("StackNamespace", namespace)
            .parameter("StackPrepullNamespace", &crate::api::prepull_namespace(namespace))
            .parameter("StackNodeRole", SIMULATED_ROLE)
            .parameter("StackProxySync", "0s")
    }

    /// A template parameter's value, as `sam deploy --parameter-overrides` gives it.
    pub fn parameter(mut self, name: &str, value: &str) -> Self {
        self.deployment = self.deployment.parameter(name, value);
        self
    }

    /// The table the template's `StackTable` stands for.
    pub fn table(mut self, name: &str) -> Self {
        self.deployment = self.deployment.resource("StackTable", name);
        self
    }

    /// A variable set (or replaced) after the template's.
    pub fn set_var(mut self, name: &str, value: &str) -> Self {
        self.set.insert(name.to_owned(), value.to_owned());
        self
    }

    /// A variable the function will not get.
    pub fn remove_var(mut self, name: &str) -> Self {
        self.removed.push(name.to_owned());
        self
    }

    /// Where the bootstraps are (default: this checkout's `sam build` for this machine).
    pub fn bootstraps(mut self, bootstraps: Bootstraps) -> Self {
        self.bootstraps = bootstraps;
        self
    }

    pub fn function(&self) -> LambdaFunction {
        self.function
    }

    /// The template's view of the function for this deployment.
    pub fn definition(&self) -> Result<FunctionDefinition, LambdaError> {
        FunctionDefinition::from_template_file(&template_path(), self.function.logical_id(), &self.deployment)
    }

    /// Every variable the bootstrap starts with.
    pub fn environment(&self) -> Result<BTreeMap<String, String>, LambdaError> {
        let definition = self.definition()?;
        let mut environment = definition.environment.clone();
        environment.extend(lambda_variables(&definition, &self.settings));
        environment.extend(local_endpoints(&self.settings));
        environment.extend(self.set.clone());
        for name in &self.removed {
            environment.remove(name);
        }
        Ok(environment)
    }

    /// Starts the emulator with the function's bootstrap; init happens at the first invocation.
    pub async fn start(&self) -> Result<Sandbox, LambdaError> {
        let definition = self.definition()?;
        let environment = self.environment()?;
        let bootstrap = self
            .bootstraps
            .bootstrap(&definition.logical_id, definition.binary.as_deref())?;
        let timeout = Duration::from_secs(definition.timeout_seconds);
        let emulator = Emulator::start(&artifacts::emulator_path()?, &bootstrap, &environment, timeout).await?;
        Ok(Sandbox { emulator, definition })
    }
}

/// A started function.
pub struct Sandbox {
    emulator: Emulator,
    definition: FunctionDefinition,
}

impl Sandbox {
    pub async fn invoke(&self, payload: &[u8]) -> Result<Invocation, LambdaError> {
        self.emulator.invoke(payload).await
    }

    pub async fn invoke_json(&self, event: &serde_json::Value) -> Result<Invocation, LambdaError> {
        self.invoke(event.to_string().as_bytes()).await
    }

    /// The emulator's and the function's output so far.
    pub fn log(&self) -> String {
        self.emulator.log()
    }

    pub fn definition(&self) -> &FunctionDefinition {
        &self.definition
    }

    pub async fn stop(self) {
        self.emulator.stop().await;
    }
}

/// What Lambda sets in every sandbox of a function (the emulator adds the Runtime API's
/// address); `AWS_LAMBDA_FUNCTION_TIMEOUT` is the emulator's own knob for the timeout.
fn lambda_variables(definition: &FunctionDefinition, settings: &EnvSettings) -> BTreeMap<String, String> {
    [
        ("AWS_LAMBDA_FUNCTION_NAME", definition.logical_id.clone()),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".to_owned()),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", definition.memory_mb.to_string()),
        ("AWS_LAMBDA_FUNCTION_TIMEOUT", definition.timeout_seconds.to_string()),
        ("AWS_LAMBDA_INITIALIZATION_TYPE", "on-demand".to_owned()),
        ("AWS_REGION", settings.dynamodb.region.clone()),
        ("AWS_DEFAULT_REGION", settings.dynamodb.region.clone()),
        ("AWS_ACCESS_KEY_ID", settings.dynamodb.access_key_id.clone()),
        ("AWS_SECRET_ACCESS_KEY", settings.dynamodb.secret_access_key.clone()),
        ("_HANDLER", "bootstrap".to_owned()),
        ("LANG", "en_US.UTF-8".to_owned()),
        ("TZ", ":UTC".to_owned()),
        ("PATH", "/usr/local/bin:/usr/bin/:/bin:/opt/bin".to_owned()),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value))
    .collect()
}

/// The local cloud in place of AWS's: DynamoDB Local, and the kubeconfig of the local cluster
/// (the deployment names no EKS cluster).
fn local_endpoints(settings: &EnvSettings) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "AWS_ENDPOINT_URL_DYNAMODB".to_owned(),
            settings.dynamodb.endpoint.clone(),
        ),
        ("K8S_KUBECONFIG".to_owned(), settings.kubeconfig.display().to_string()),
    ])
}
