//! Every time limit of the request path, and the arithmetic that ties them to the promises
//! made to clients: a create answers within 5 s, any request before API Gateway's 29 s.
//! The `const` assertions at the bottom fail the build when an edit breaks a promise.

use std::time::Duration;

/// Clients give up on a create after this and never retry (the contract).
pub(crate) const CLIENT_GIVES_UP: Duration = Duration::from_secs(5);
/// API Gateway's integration timeout.
pub(crate) const API_GATEWAY_TIMEOUT: Duration = Duration::from_secs(29);

// Creates.

/// How long a create may work before it is abandoned (the contract's 3 s answer).
pub(crate) const CREATE_WORK_BUDGET: Duration = Duration::from_millis(3000);
/// How long an abandoned create may spend removing what it made; the reconciler removes
/// whatever is still left after that.
pub(crate) const CREATE_CLEANUP_BUDGET: Duration = Duration::from_millis(1000);
/// The longest a create takes to answer, success or not.
pub const CREATE_DEADLINE: Duration = CREATE_WORK_BUDGET.saturating_add(CREATE_CLEANUP_BUDGET);
/// The most `STACK_CREATE_WAIT` may be: the rest of the work budget is for the calls around
/// the wait for the scheduler.
pub(crate) const MAX_CREATE_WAIT: Duration = CREATE_WORK_BUDGET.saturating_sub(Duration::from_millis(500));
/// The most `STACK_CREATE_QUEUE_WAIT` may be: at least a second of the work budget is left
/// for the create itself.
pub(crate) const MAX_CREATE_QUEUE_WAIT: Duration = CREATE_WORK_BUDGET.saturating_sub(Duration::from_secs(1));
/// A claimed Idempotency-Key this old without a stack record belongs to a create that died.
pub(crate) const ABANDONED_CLAIM_AGE: Duration = Duration::from_secs(30);

// Every other request.

/// The longest any request runs.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(25);
/// Kept free before the Lambda invocation's own deadline to send the answer.
pub const LAMBDA_MARGIN: Duration = Duration::from_millis(500);
/// How long the background task a batch-delete request spawns (after answering 202) works
/// on its job; the reconciler carries on with the rest.
pub const BATCH_JOB_BUDGET: Duration = Duration::from_secs(60);

// Each call to a dependency: bounded below the budgets that contain it.

/// One DynamoDB operation, retries included.
pub(crate) const AWS_OPERATION_TIMEOUT: Duration = Duration::from_secs(3);
/// One DynamoDB attempt.
pub(crate) const AWS_ATTEMPT_TIMEOUT: Duration = Duration::from_millis(1500);
pub(crate) const AWS_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// One apiserver call: connect, then write the request and read the answer.
pub(crate) const KUBE_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
pub(crate) const KUBE_READ_TIMEOUT: Duration = Duration::from_secs(5);
pub(crate) const KUBE_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

// The reconciler.

/// Kept free at the end of a pass's budget for actions already started (each call is
/// bounded by the timeouts above) and for releasing the lease.
pub(crate) const RECONCILE_END_RESERVE: Duration = Duration::from_secs(15);
/// How long a stalled batch-delete job waits before the reconciler takes it over; the API
/// saves progress every few seconds while it works on one.
pub(crate) const JOB_IDLE: Duration = Duration::from_secs(30);
/// The lease outlives the pass's deadline a little so that a pass finishing late is still
/// the owner when it releases.
pub(crate) const LEASE_SLACK: Duration = Duration::from_secs(5);

const fn ms(d: Duration) -> u128 {
    d.as_millis()
}

// A create, its cleanup included, answers before clients give up, with room for the
// network and API Gateway.
const _: () = assert!(ms(CREATE_DEADLINE) + 500 <= ms(CLIENT_GIVES_UP));
const _: () = assert!(ms(MAX_CREATE_WAIT) < ms(CREATE_WORK_BUDGET));
const _: () = assert!(ms(MAX_CREATE_QUEUE_WAIT) + 1000 <= ms(CREATE_WORK_BUDGET));
// A dependency call never outlives the request that makes it.
const _: () = assert!(ms(AWS_OPERATION_TIMEOUT) <= ms(CREATE_WORK_BUDGET));
const _: () = assert!(ms(AWS_ATTEMPT_TIMEOUT) <= ms(AWS_OPERATION_TIMEOUT));
const _: () = assert!(ms(REQUEST_DEADLINE) + ms(LAMBDA_MARGIN) < ms(API_GATEWAY_TIMEOUT));
// A claim is old only well after its create's deadline passed.
const _: () = assert!(ms(CREATE_DEADLINE) < ms(ABANDONED_CLAIM_AGE));
