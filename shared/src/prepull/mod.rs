//! The pre-pull: the images stacks will need, kept on every stack node before the start gun.
//!
//! What it keeps: `STACK_PREPULL_IMAGES`, the images an operator declares (`PUT /prepull`), and
//! the images of running stacks (for `STACK_PREPULL_KEEP` after the last one ended). How: one
//! DaemonSet in its own namespace (`daemon_set.rs`), which also reaches nodes that join
//! mid-event; its state rides in an annotation (`state.rs`), so there is nothing else to store.
//! The reconciler keeps it in line every pass: records the images in use, leaves out images
//! that cannot be pulled (shown, not retried forever), removes the DaemonSet when nothing is
//! wanted, and takes the startup taint off each node that holds every image (`readiness.rs`).

mod daemon_set;
mod readiness;
mod state;

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};

pub use readiness::{ImageReadiness, Readiness};
pub use state::ImageFailure;

use crate::cluster::{ClusterError, PrepullObjects, has_startup_taint, is_stack_node_up};
use crate::config::{Config, PrepullPolicy};
use crate::tenancy::Scope;
use daemon_set::{Blueprint, images_of, state_of};
use state::{EVERY_TENANT, PrepullState};

/// Read-modify-write attempts against a DaemonSet another function changes at the same time.
const ATTEMPTS: usize = 3;

/// What one reconcile pass did with the pre-pull.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Kept {
    /// Images the DaemonSet holds now.
    pub images: usize,
    /// Images found not pullable this pass (on however many nodes).
    pub failed: usize,
    /// Nodes whose startup taint came off.
    pub untainted: Vec<String>,
}

pub(crate) struct Prepull {
    objects: PrepullObjects,
    policy: PrepullPolicy,
    node_role: String,
    node_taint: Option<crate::config::NodeTaint>,
}

impl Prepull {
    pub(crate) fn new(client: kube::Client, config: &Config) -> Self {
        Self {
            objects: PrepullObjects::new(client, &config.prepull.namespace),
            policy: config.prepull.clone(),
            node_role: config.validation.node_role.clone(),
            node_taint: config.validation.node_taint.clone(),
        }
    }

    /// The list of `scope` (a tenant, or every tenant's operators) replaces its previous one;
    /// the DaemonSet follows at once.
    pub(crate) async fn declare(
        &self,
        scope: &Scope,
        images: BTreeSet<String>,
        nodes: &[Node],
    ) -> Result<Readiness, ClusterError> {
        let who = declarer(scope);
        let (state, pods) = self.update(|state, _| state.declare(who, images.clone())).await?;
        Ok(self.report(&self.shown_to(scope, &state), &state, nodes, &pods).0)
    }

    /// Where the images `scope` may see stand on the stack nodes: a tenant's key sees the
    /// images its tenant declared (another tenant's challenges are not its business), a key of
    /// every tenant sees every image kept.
    pub(crate) async fn readiness(&self, scope: &Scope, nodes: &[Node]) -> Result<Readiness, ClusterError> {
        let (daemon_set, pods) = tokio::try_join!(self.objects.daemon_set(), self.objects.pods())?;
        let state = daemon_set.as_ref().map(state_of).unwrap_or_default();
        Ok(self.report(&self.shown_to(scope, &state), &state, nodes, &pods).0)
    }

    fn shown_to(&self, scope: &Scope, state: &PrepullState) -> BTreeSet<String> {
        match scope {
            Scope::Tenant(tenant) => state.declared_by(tenant.as_str()),
            Scope::All => self
                .wanted(state)
                .into_iter()
                .chain(state.failed.keys().cloned())
                .collect(),
        }
    }

    /// A reconcile pass's share: records `in_use`, leaves out what failed, removes the
    /// startup taint from nodes that hold everything.
    pub(crate) async fn keep(
        &self,
        in_use: &BTreeSet<String>,
        nodes: &[Node],
        now: Timestamp,
    ) -> Result<Kept, ClusterError> {
        let in_use = if self.policy.in_use {
            in_use.clone()
        } else {
            BTreeSet::new()
        };
        let keep = self.policy.keep;
        let mut failed = 0;
        let (state, pods) = self
            .update(|state, pods| {
                state.observe(&in_use, now, keep);
                let (_, failures) = self.report(&self.wanted(state), state, nodes, pods);
                let known = state.failed.len();
                for found in failures {
                    state.record_failure(&found.image, ImageFailure::new(&found.node, found.failure, now));
                }
                failed = state.failed.len() - known;
            })
            .await?;
        let (readiness, _) = self.report(&self.wanted(&state), &state, nodes, &pods);
        let mut untainted = Vec::new();
        for node in nodes.iter().filter(|n| has_startup_taint(n)) {
            let name = node.metadata.name.clone().unwrap_or_default();
            if readiness.complete_nodes.contains(&name) {
                match self.objects.remove_startup_taint(node).await {
                    Ok(()) => untainted.push(name),
                    // Changed meanwhile: the next pass sees it again.
                    Err(ClusterError::Conflict) => {}
                    Err(err) => return Err(err),
                }
            }
        }
        if !untainted.is_empty() {
            tracing::info!(nodes = ?untainted, "startup taint removed: the nodes hold every pre-pulled image");
        }
        Ok(Kept {
            images: self.wanted(&state).len(),
            failed,
            untainted,
        })
    }

    fn wanted(&self, state: &PrepullState) -> BTreeSet<String> {
        state.wanted(&self.policy.images)
    }

    fn report(
        &self,
        shown: &BTreeSet<String>,
        state: &PrepullState,
        nodes: &[Node],
        pods: &[Pod],
    ) -> (Readiness, Vec<readiness::NewFailure>) {
        let up: Vec<String> = nodes
            .iter()
            .filter(|n| is_stack_node_up(n, &self.node_role))
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        readiness::readiness(shown, state, &up, pods)
    }

    /// Reads the DaemonSet and its pods, applies `change` to its state, and writes back what
    /// differs (removes it when nothing is wanted). Returns the state written and the pods.
    async fn update(
        &self,
        mut change: impl FnMut(&mut PrepullState, &[Pod]),
    ) -> Result<(PrepullState, Vec<Pod>), ClusterError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (existing, pods) = tokio::try_join!(self.objects.daemon_set(), self.objects.pods())?;
            let mut state = existing.as_ref().map(state_of).unwrap_or_default();
            change(&mut state, &pods);
            match self.write(&state, existing.as_ref()).await {
                Err(ClusterError::Conflict) if attempt < ATTEMPTS => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(err) => return Err(err),
                Ok(()) => return Ok((state, pods)),
            }
        }
    }

    async fn write(&self, state: &PrepullState, existing: Option<&DaemonSet>) -> Result<(), ClusterError> {
        let wanted = self.wanted(state);
        // Failures are remembered while something is declared: a declared image that failed
        // is not tried again at the next pass.
        if wanted.is_empty() && (state.failed.is_empty() || state.declared.is_empty()) {
            if existing.is_some() {
                tracing::info!(
                    namespace = self.objects.namespace(),
                    "no image to pre-pull: DaemonSet removed"
                );
                self.objects.delete().await?;
            }
            return Ok(());
        }
        let held: BTreeSet<String> = wanted.iter().chain([&self.policy.helper_image]).cloned().collect();
        let unchanged = existing.is_some_and(|ds| images_of(ds) == held && state_of(ds) == *state);
        if unchanged {
            return Ok(());
        }
        let blueprint = Blueprint {
            policy: &self.policy,
            node_role: &self.node_role,
            node_taint: self.node_taint.as_ref(),
        };
        self.objects.save(blueprint.daemon_set(&held, state), existing).await
    }
}

/// Whose list a key declares: its tenant's, or the deployment's for a key of every tenant.
fn declarer(scope: &Scope) -> &str {
    match scope {
        Scope::Tenant(tenant) => tenant.as_str(),
        Scope::All => EVERY_TENANT,
    }
}
