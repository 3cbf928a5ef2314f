//! The local Kubernetes cluster: the admin client and throw-away namespaces.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::conditions;
use kube::{Api, Client};

use super::wait::wait_for;
use super::{EnvError, EnvSettings, unique_name};

/// Label on every namespace the harness creates, so leftovers are easy to find.
pub const TEST_NAMESPACE_LABEL: &str = "stack-tests/ephemeral";

/// The service-account controller creates `default` shortly after the namespace; pods
/// created before that are rejected by the ServiceAccount admission plugin.
const DEFAULT_SERVICE_ACCOUNT_TIMEOUT: Duration = Duration::from_secs(30);

/// A client with the admin kubeconfig `up` wrote (group system:masters).
pub async fn kube_client(settings: &EnvSettings) -> Result<Client, EnvError> {
    let config = kube_config(settings).await?;
    Client::try_from(config).map_err(|e| EnvError::Kubeconfig(e.to_string()))
}

/// The admin kubeconfig `up` wrote, read (the apiserver's address is its `cluster_url`).
pub async fn kube_config(settings: &EnvSettings) -> Result<kube::Config, EnvError> {
    let kubeconfig = Kubeconfig::read_from(&settings.kubeconfig)
        .map_err(|e| EnvError::Kubeconfig(format!("{}: {e}", settings.kubeconfig.display())))?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| EnvError::Kubeconfig(e.to_string()))
}

/// Waits until the service-account controller has created `namespace`'s `default` account.
pub(crate) async fn wait_default_service_account(client: &Client, namespace: &str) -> Result<(), EnvError> {
    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), namespace);
    wait_for(
        &accounts,
        "default",
        &format!("service account {namespace}/default"),
        DEFAULT_SERVICE_ACCOUNT_TIMEOUT,
        conditions::is_created(),
    )
    .await
    .map(|_| ())
}

/// A uniquely named namespace for one test.
#[derive(Clone)]
pub struct TestNamespace {
    name: String,
    client: Client,
}

impl TestNamespace {
    /// Creates `<prefix>-<random>` and waits until pods can be created in it.
    pub async fn create(client: &Client, prefix: &str) -> Result<Self, EnvError> {
        Self::create_with_labels(client, prefix, BTreeMap::new()).await
    }

    /// Like [`Self::create`], with extra labels (e.g. `pod-security.kubernetes.io/enforce`).
    pub async fn create_with_labels(
        client: &Client,
        prefix: &str,
        mut labels: BTreeMap<String, String>,
    ) -> Result<Self, EnvError> {
        let name = unique_name(prefix);
        labels.insert(TEST_NAMESPACE_LABEL.to_owned(), "true".to_owned());
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .map_err(EnvError::kube(format!("create namespace {name}")))?;
        wait_default_service_account(client, &name).await?;
        Ok(Self {
            name,
            client: client.clone(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// An API for namespaced objects of this namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// Starts deleting the namespace and everything in it (does not wait for it to be gone).
    pub async fn delete(self) -> Result<(), EnvError> {
        Api::<Namespace>::all(self.client)
            .delete(&self.name, &DeleteParams::background())
            .await
            .map(|_| ())
            .map_err(EnvError::kube(format!("delete namespace {}", self.name)))
    }
}
