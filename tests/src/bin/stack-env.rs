//! Helper of `tests/env/up`: objects the local environment needs that are easier to make
//! typed than in bash.
//!
//! ```text
//! stack-env create-table <name>   # DynamoDB table from template.yaml's StackTable (no-op if present)
//! stack-env bootstrap-nodes       # the default simulated nodes, waited until a stack pod schedules
//! stack-env admission-policy      # functions/kubernetes-rbac.yaml's admission policies, waited until enforced
//! stack-env init-real-nodes       # the real nodes given addresses (as EKS's cloud controller does), Ready, running a pod under runc and under gVisor
//! stack-env init-joining-node <name> # a node that joins at runtime (tests/env/add-node) given its address, Ready
//! stack-env cluster-dns <ip>      # CoreDNS on the real nodes behind the kube-dns Service at <ip>, waited until Ready
//! stack-env lambda-bootstraps     # sam build's bootstraps present and newer than the sources (else exit 1)
//! stack-env invoke <api|reconciler> <event.json> [Parameter=Value...]
//!                                 # the function invoked once under the Lambda emulator (tests/env/invoke)
//! stack-env lambda-gateway <port> [Parameter=Value...]
//!                                 # the API function under the emulator behind a local stand-in of API
//!                                 # Gateway on 127.0.0.1:<port>, until killed (tests/env/contract)
//! ```
//! Reads the variables of `tests/env/.state/env.sh` (see `stack_tests::env::EnvSettings`).

use std::process::ExitCode;

use stack_tests::env::{
    EnvError, EnvSettings, SIMULATED_ROLE, TableDefinition, cluster_dns, create_table, dynamodb_client, kube_client,
    kube_config, nodes, rbac_manifest, real_nodes,
};
use stack_tests::lambda::artifacts::Bootstraps;
use stack_tests::lambda::{Gateway, LambdaError, LambdaFunction, LocalFunction, local_gateway};

const USAGE: &str = "usage: stack-env create-table <name> | stack-env bootstrap-nodes | stack-env admission-policy | stack-env init-real-nodes | stack-env init-joining-node <name> | stack-env cluster-dns <service-ip> | stack-env lambda-bootstraps | stack-env invoke <api|reconciler> <event.json> [Parameter=Value...] | stack-env lambda-gateway <port> [Parameter=Value...]";

#[derive(Debug, thiserror::Error)]
enum ToolError {
    #[error(transparent)]
    Env(#[from] EnvError),
    #[error(transparent)]
    Lambda(#[from] LambdaError),
    #[error("reading {path}: {source}")]
    Event { path: String, source: std::io::Error },
    #[error("{0} is not Parameter=Value")]
    Parameter(String),
    #[error("the invocation failed ({0})")]
    Failed(u16),
    #[error("serving the gateway: {0}")]
    Serve(#[source] std::io::Error),
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["create-table", name] => run_create_table(name).await.map_err(ToolError::from),
        ["bootstrap-nodes"] => run_bootstrap_nodes().await.map_err(ToolError::from),
        ["admission-policy"] => run_admission_policy().await.map_err(ToolError::from),
        ["init-real-nodes"] => run_init_real_nodes().await.map_err(ToolError::from),
        ["init-joining-node", name] => run_init_joining_node(name).await.map_err(ToolError::from),
        ["cluster-dns", service_ip] => run_cluster_dns(service_ip).await.map_err(ToolError::from),
        ["lambda-bootstraps"] => check_bootstraps().map_err(ToolError::from),
        ["lambda-gateway", port, parameters @ ..] => serve_gateway(port, parameters).await,
        ["invoke", function, event, parameters @ ..] => match LambdaFunction::from_name(function) {
            Some(function) => invoke(function, event, parameters).await,
            None => {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
        },
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("stack-env: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run_create_table(name: &str) -> Result<(), EnvError> {
    let settings = EnvSettings::load()?;
    let definition = TableDefinition::stack_table()?;
    let created = create_table(&dynamodb_client(&settings), name, &definition).await?;
    let verb = if created { "created" } else { "already present:" };
    eprintln!("stack-env: {verb} table {name} (schema of template.yaml StackTable)");
    Ok(())
}

async fn run_bootstrap_nodes() -> Result<(), EnvError> {
    let settings = EnvSettings::load()?;
    let client = kube_client(&settings).await?;
    let wanted = nodes::default_nodes();
    let added = futures::future::join_all(wanted.iter().map(|node| nodes::add_node(&client, node))).await;
    for (node, result) in wanted.iter().zip(added) {
        result?;
        let role = node.labels.get(nodes::ROLE_LABEL).map_or("-", String::as_str);
        let external = node.external_ip.as_deref().unwrap_or("-");
        eprintln!(
            "stack-env: node {} Ready (role={role}, ExternalIP {external})",
            node.name
        );
    }
    nodes::wait_schedulable(&client, nodes::SIMULATED_ROLE).await?;
    eprintln!("stack-env: a role={} pod schedules", nodes::SIMULATED_ROLE);
    Ok(())
}

async fn run_admission_policy() -> Result<(), EnvError> {
    let settings = EnvSettings::load()?;
    let client = kube_client(&settings).await?;
    rbac_manifest::apply_admission_policy(&client).await?;
    eprintln!(
        "stack-env: admission policies {} and {} of {} enforced",
        rbac_manifest::POLICY_NAME,
        rbac_manifest::HARDENING_POLICY_NAME,
        rbac_manifest::rbac_manifest_path().display()
    );
    Ok(())
}

/// A node joining at runtime keeps its startup taint, so no probe pod runs on it.
async fn run_init_joining_node(name: &str) -> Result<(), EnvError> {
    let settings = EnvSettings::load()?;
    let client = kube_client(&settings).await?;
    let node = real_nodes::init_joining(&client, name).await?;
    eprintln!(
        "stack-env: node {name} joined, Ready (address {}), taints {:?}",
        stack_core::node_external_ip(&node).unwrap_or_default(),
        node.spec
            .and_then(|s| s.taints)
            .unwrap_or_default()
            .iter()
            .map(|t| format!("{}={}:{}", t.key, t.value.as_deref().unwrap_or_default(), t.effect))
            .collect::<Vec<_>>()
    );
    Ok(())
}

async fn run_init_real_nodes() -> Result<(), EnvError> {
    let settings = EnvSettings::load()?;
    let registry = settings
        .registry
        .clone()
        .ok_or_else(|| EnvError::NotConfigured("STACK_ENV_REGISTRY is not set".to_owned()))?;
    let client = kube_client(&settings).await?;
    for node in real_nodes::init(&client, settings.real_nodes, &registry).await? {
        let address = stack_core::node_external_ip(&node).unwrap_or_default();
        eprintln!(
            "stack-env: real node {} Ready (role={}, address {address}), a pod of {} ran on it under runc and under gVisor (RuntimeClass {})",
            node.metadata.name.as_deref().unwrap_or_default(),
            real_nodes::STACK_ROLE,
            real_nodes::image(&registry, "tcp"),
            real_nodes::GVISOR_RUNTIME_CLASS,
        );
    }
    Ok(())
}

async fn run_cluster_dns(service_ip: &str) -> Result<(), EnvError> {
    let settings = EnvSettings::load()?;
    let missing = |name: &str| EnvError::NotConfigured(format!("{name} is not set (no real nodes?)"));
    let registry = settings
        .registry
        .as_deref()
        .ok_or_else(|| missing("STACK_ENV_REGISTRY"))?;
    let internet_host = settings
        .internet_host
        .as_deref()
        .ok_or_else(|| missing("STACK_ENV_INTERNET_HOST"))?;
    let config = kube_config(&settings).await?;
    let client = kube_client(&settings).await?;
    cluster_dns::apply(&client, &config.cluster_url, registry, internet_host, service_ip).await?;
    eprintln!(
        "stack-env: CoreDNS ({}) Ready behind {}/{} at {service_ip}: {} and {} ({internet_host})",
        real_nodes::image(registry, "coredns"),
        cluster_dns::NAMESPACE,
        cluster_dns::SERVICE,
        cluster_dns::CLUSTER_DOMAIN,
        cluster_dns::INTERNET_NAME
    );
    Ok(())
}

/// Both functions' bootstraps, as the emulator would run them.
fn check_bootstraps() -> Result<(), LambdaError> {
    let bootstraps = Bootstraps::sam_build();
    for function in [LambdaFunction::Api, LambdaFunction::Reconciler] {
        bootstraps.bootstrap(function.logical_id(), None)?;
    }
    eprintln!("stack-env: bootstraps in {} are up to date", bootstraps.describe());
    Ok(())
}

/// One invocation of `function` ([`local_deployment`]) with the event in the file `event`.
/// The log goes to stderr, the answer to stdout.
async fn invoke(function: LambdaFunction, event: &str, parameters: &[&str]) -> Result<(), ToolError> {
    let settings = EnvSettings::load()?;
    let payload = std::fs::read(event).map_err(|source| ToolError::Event {
        path: event.to_owned(),
        source,
    })?;
    let sandbox = local_deployment(function, &settings, parameters)?.start().await?;
    let invocation = sandbox.invoke(&payload).await;
    eprint!("{}", sandbox.log());
    sandbox.stop().await;
    let invocation = invocation?;
    match invocation.json() {
        Ok(answer) => println!("{answer:#}"),
        Err(_) => println!("{}", invocation.text()),
    }
    if invocation.status == 200 {
        Ok(())
    } else {
        Err(ToolError::Failed(invocation.status))
    }
}

/// `function` with the template's defaults over the local environment (its table, the
/// kubeconfig, key `local-test-key`), stacks on the simulated nodes when there are no real
/// ones (on the real ones, reachable from this machine as `tests/env/run`'s), then `parameters`
/// (`Name=Value`).
fn local_deployment(
    function: LambdaFunction,
    settings: &EnvSettings,
    parameters: &[&str],
) -> Result<LocalFunction, ToolError> {
    let mut local = LocalFunction::new(function, settings);
    match &settings.registry {
        Some(registry) if settings.real_nodes > 0 => {
            local = local.parameter("StackAllowIngressCidrs", &real_nodes::participant_cidr(registry));
        }
        _ => local = local.parameter("StackNodeRole", SIMULATED_ROLE),
    }
    for parameter in parameters {
        let (name, value) = parameter
            .split_once('=')
            .ok_or_else(|| ToolError::Parameter((*parameter).to_owned()))?;
        local = local.parameter(name, value);
    }
    Ok(local)
}

/// The API function behind the local stand-in of API Gateway on `127.0.0.1:<port>`.
async fn serve_gateway(port: &str, parameters: &[&str]) -> Result<(), ToolError> {
    // The stand-in logs the function's failures.
    stack_core::init_tracing();
    let settings = EnvSettings::load()?;
    let sandbox = local_deployment(LambdaFunction::Api, &settings, parameters)?
        .start()
        .await?;
    let gateway = Gateway::of_template()?;
    let addr = format!("127.0.0.1:{port}");
    let listener = tokio::net::TcpListener::bind(&addr).await.map_err(ToolError::Serve)?;
    eprintln!("stack-env: the API function behind API Gateway's stand-in on http://{addr}");
    local_gateway::serve(listener, sandbox, gateway)
        .await
        .map_err(ToolError::Serve)
}
