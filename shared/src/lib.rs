//! Shared core of stack-provisioner: what the API and the reconciler functions use.
//!
//! The modules are private and form layers (checked by `module_graph`): the model, deadlines
//! and tenancy at the bottom; configuration and the AWS/EKS plumbing; the validator, the store
//! (DynamoDB) and the cluster (Kubernetes); the lifecycle rule; the stack operations; the
//! reconciler on top. What other crates use is re-exported here, so a `pub` item that is not
//! listed below is a mistake the `unreachable_pub` lint reports.

mod aws;
mod cluster;
mod config;
mod deadlines;
mod eks;
mod history;
mod init_error;
mod kube_names;
mod late_writes;
mod lifecycle;
mod model;
#[cfg(test)]
mod module_graph;
mod prepull;
mod quantity;
mod reconcile;
mod stacks;
mod store;
mod telemetry;
mod tenancy;
#[cfg(any(test, feature = "test-fixtures"))]
mod test_fixture;
mod validate;

// The domain: stacks, their ports and status, batch-delete jobs, the labels every object carries.
pub use model::{
    BatchDeleteJob, Exposure, FailureReason, JobError, JobStatus, MANAGED_BY_LABEL, MANAGED_BY_VALUE, OWN_LABEL_PREFIX,
    ObservedState, PortMapping, Protocol, STACK_ID_LABEL, STARTUP_TAINT, StackId, StackRecord, StackStatus, StackUsage,
    TargetPort, new_job_id,
};
// The time budgets of the request path.
pub use deadlines::{BATCH_JOB_BUDGET, CREATE_DEADLINE, LAMBDA_MARGIN, REQUEST_DEADLINE};
// Tenants, roles and keys (pure).
pub use tenancy::{Action, KeyHash, KeyRing, Principal, Role, Scope, TenantId};
// The dashboard's history: reconcile passes and create refusals.
pub use history::{PassSnapshot, RefusalMinute, RefusalReason};

// Start-up: settings, logs, the clients.
pub use aws::https_client;
pub use cluster::{ClusterError, apply_client_limits, client_builder, node_external_ip};
pub use config::{Config, ConfigError, ValidationPolicy};
pub use eks::{Credentials, eks_presigned_url, eks_token};
pub use init_error::{INIT_ERROR_TYPE, refuse_to_start};
pub use telemetry::{error_chain, init_tracing};

// The manifest's rules.
pub use validate::{Rejection, validate};
// DynamoDB.
pub use store::{
    IdempotencyClaim, ListCursor, MAX_ITEM_BYTES, Manifest, Store, StoreError, StoredManifest, UnstorableManifest,
};
// What the API does with stacks.
pub use stacks::{
    CreateOutcome, CreateRequest, ErrorClass, EventPlan, ExpectedStacks, Forecast, MAX_BATCH_IDS, MAX_PREPULL_IMAGES,
    SetupError, StackError, Stacks, Stats,
};
// The images kept on the stack nodes before the start gun (`ImageFailure` and `ImageReadiness`
// only as the types of `Readiness`'s fields, which the API serializes).
pub use prepull::{ImageFailure, ImageReadiness, Readiness};
// The reconciler.
pub use reconcile::{LEASE_NAME, PassError, Reconciler, Summary, run_pass};
// Other crates' tests: text that barely compresses (and `StackRecord::test()`).
#[cfg(any(test, feature = "test-fixtures"))]
pub use test_fixture::noise;
